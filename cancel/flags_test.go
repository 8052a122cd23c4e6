package cancel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestRequestSetsFlag(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := e.flags(t, b.Client, nil)
			ctx := t.Context()

			if set, err := f.Check(ctx, "job-1"); err != nil || set {
				t.Fatalf("Check before Request = %v, %v; want false, nil", set, err)
			}
			if err := f.Request(ctx, "job-1", time.Minute); err != nil {
				t.Fatal(err)
			}
			if set, err := f.Check(ctx, "job-1"); err != nil || !set {
				t.Fatalf("Check after Request = %v, %v; want true, nil", set, err)
			}
			pttl, err := b.Client.PTTL(ctx, keys.New(e.prefix).CancelFlag("job-1")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pttl <= 0 || pttl > time.Minute {
				t.Fatalf("flag PTTL = %v, want in (0, 1m]", pttl)
			}
			if set, err := f.Check(ctx, "job-2"); err != nil || set {
				t.Fatalf("Check of another id = %v, %v; want false, nil", set, err)
			}
		})
	}
}

func TestRequestNeverShortensFlag(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := e.flags(t, b.Client, nil)
			ks := keys.New(e.prefix)
			ctx := t.Context()
			pttl := func(id string) time.Duration {
				t.Helper()
				d, err := b.Client.PTTL(ctx, ks.CancelFlag(id)).Result()
				if err != nil {
					t.Fatal(err)
				}
				return d
			}

			// Long, then short: the long promise stands.
			if err := f.Request(ctx, "long-first", time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := f.Request(ctx, "long-first", time.Second); err != nil {
				t.Fatal(err)
			}
			if d := pttl("long-first"); d < 59*time.Minute {
				t.Fatalf("after 1h then 1s: PTTL = %v, want about 1h", d)
			}

			// Short, then long: the flag lives longer.
			if err := f.Request(ctx, "short-first", time.Second); err != nil {
				t.Fatal(err)
			}
			if err := f.Request(ctx, "short-first", time.Hour); err != nil {
				t.Fatal(err)
			}
			if d := pttl("short-first"); d < 59*time.Minute {
				t.Fatalf("after 1s then 1h: PTTL = %v, want about 1h", d)
			}

			// A flag someone wrote without expiry keeps living for good.
			if err := b.Client.Set(ctx, ks.CancelFlag("forever"), "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := f.Request(ctx, "forever", time.Second); err != nil {
				t.Fatal(err)
			}
			if d := pttl("forever"); d != -1 {
				t.Fatalf("flag without expiry after a 1s request: PTTL = %v, want -1 (none)", d)
			}
		})
	}
}

func TestRequestRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	nc := testenv.NATS(t).Conn(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))
	ctx := t.Context()

	sub, err := nc.SubscribeSync(e.subject)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		id   string
		ttl  time.Duration
	}{
		{"empty id", "", time.Minute},
		{"id too long", strings.Repeat("a", cancel.MaxIDLen+1), time.Minute},
		{"control character", "job\n1", time.Minute},
		{"invalid UTF-8", "job\xff", time.Minute},
		{"brace", "job{1}", time.Minute},
		{"zero ttl", "job-1", 0},
		{"negative ttl", "job-1", -time.Second},
	} {
		err := f.Request(ctx, tc.id, tc.ttl)
		if !errors.Is(err, cancel.ErrInvalid) {
			t.Errorf("%s: Request err = %v, want ErrInvalid", tc.name, err)
		}
		if tc.ttl > 0 {
			if _, err := f.Check(ctx, tc.id); !errors.Is(err, cancel.ErrInvalid) {
				t.Errorf("%s: Check err = %v, want ErrInvalid", tc.name, err)
			}
		}
	}

	if n, err := rdb.Keys(ctx, e.prefix+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("keys under the test's prefix = %q, %v; want none", n, err)
	}
	// Absence can only be waited for; every publish would have been sent by now.
	if m, err := sub.NextMsg(200 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a bad request published %q (err %v)", m.Data, err)
	}

	// The longest id allowed is accepted: the limit is where it says.
	if err := f.Request(ctx, strings.Repeat("a", cancel.MaxIDLen), time.Minute); err != nil {
		t.Fatalf("Request with a %d-byte id: %v", cancel.MaxIDLen, err)
	}
}

func TestRequestFailsAndPublishesNothingWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	nc := testenv.NATS(t).Conn(t)
	f := e.flags(t, rdb, testenv.NATS(t).Conn(t))

	sub, err := nc.SubscribeSync(e.subject)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	srv.Kill(t)
	ctx, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	if err := f.Request(ctx, "job-1", time.Minute); err == nil || errors.Is(err, cancel.ErrInvalid) {
		t.Fatalf("Request with Redis down: err = %v, want a Redis error", err)
	}
	if m, err := sub.NextMsg(200 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a request whose flag was not written published %q (err %v)", m.Data, err)
	}

	// The same subscription does see a request once Redis is back, so the
	// silence above was the request's doing.
	srv.Restart(t)
	if err := f.Request(ctx, "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != "job-1" {
		t.Fatalf("after Redis came back: message %v, %v; want job-1", m, err)
	}
}

func TestRequestSucceedsWhenNATSIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.Redis(t).Client(t)
	srv := testenv.StartNATS(t)
	nc := srv.Conn(t)
	f := e.flags(t, rdb, nc)

	srv.Stop(t)
	disconnected(t, nc)
	if err := f.Request(t.Context(), "job-1", time.Minute); err != nil {
		t.Fatalf("Request with NATS down: %v; the flag is the truth, NATS only speeds it up", err)
	}
	if set, err := f.Check(t.Context(), "job-1"); err != nil || !set {
		t.Fatalf("Check = %v, %v; want true, nil", set, err)
	}
	if len(e.logs.Lines("level=WARN", "not published", "cancel_id=job-1")) == 0 {
		t.Fatalf("no warning that the request was not published; log:\n%s", e.logs)
	}
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	for _, subject := range []string{"leasehold.>", "leasehold.*.cancel", "leasehold..cancel", "lease hold", ".cancel"} {
		if _, err := cancel.New(store.New(rdb, store.Config{}), nil, cancel.Config{Subject: subject}); !errors.Is(err, cancel.ErrInvalid) {
			t.Errorf("New with subject %q: err = %v, want ErrInvalid", subject, err)
		}
		if _, err := cancel.NewWatcher(store.New(rdb, store.Config{}), nil, cancel.WatcherConfig{Subject: subject}); !errors.Is(err, cancel.ErrInvalid) {
			t.Errorf("NewWatcher with subject %q: err = %v, want ErrInvalid", subject, err)
		}
	}
	if _, err := cancel.New(nil, nil, cancel.Config{}); !errors.Is(err, cancel.ErrInvalid) {
		t.Errorf("New with a nil store: err = %v, want ErrInvalid", err)
	}
	if _, err := cancel.NewWatcher(nil, nil, cancel.WatcherConfig{}); !errors.Is(err, cancel.ErrInvalid) {
		t.Errorf("NewWatcher with a nil store: err = %v, want ErrInvalid", err)
	}
	if _, err := cancel.NewWatcher(store.New(rdb, store.Config{}), nil, cancel.WatcherConfig{Poll: -time.Second}); !errors.Is(err, cancel.ErrInvalid) {
		t.Errorf("NewWatcher with a negative poll: err = %v, want ErrInvalid", err)
	}
}
