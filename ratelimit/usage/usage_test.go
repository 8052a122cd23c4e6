package usage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// eachBackend runs test on a single Redis and on a Redis Cluster.
func eachBackend(t *testing.T, test func(t *testing.T, rdb redis.UniversalClient)) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			test(t, b.Client)
		})
	}
}

func newCounters(t testing.TB, rdb redis.UniversalClient, cfg usage.Config) (*usage.Counters, keys.Space) {
	t.Helper()
	prefix := testenv.Prefix(t)
	c, err := usage.New(store.New(rdb, store.Config{Prefix: prefix}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, keys.New(prefix)
}

// today is midnight UTC of the current day, so the tests stay inside the
// retention whenever they run.
func today() time.Time { return time.Now().UTC().Truncate(24 * time.Hour) }

func add(t testing.TB, c *usage.Counters, tenant, counter string, n int64, id string, at time.Time) bool {
	t.Helper()
	added, err := c.Add(t.Context(), tenant, counter, n, id, at)
	if err != nil {
		t.Fatalf("add %s/%s %d %q: %v", tenant, counter, n, id, err)
	}
	return added
}

// count is tenant's count of counter on the UTC day of day.
func count(t testing.TB, c *usage.Counters, tenant, counter string, day time.Time) int64 {
	t.Helper()
	days, err := c.Get(t.Context(), tenant, day, day)
	if err != nil {
		t.Fatal(err)
	}
	return days[0].Counts[counter]
}

func TestSameEventCountsOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newCounters(t, rdb, usage.Config{})
		at := today().Add(10 * time.Hour)
		if !add(t, c, "acme", "jobs", 3, "evt-1", at) {
			t.Fatal("first add not applied")
		}
		if add(t, c, "acme", "jobs", 3, "evt-1", at) {
			t.Fatal("retried add applied again")
		}
		if n := count(t, c, "acme", "jobs", at); n != 3 {
			t.Fatalf("count %d after an event and its retry, want 3", n)
		}
	})
}

func TestConcurrentDuplicatesCountOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newCounters(t, rdb, usage.Config{})
		at := today().Add(time.Hour)
		var applied atomic.Int32
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				added, err := c.Add(t.Context(), "acme", "tokens", 7, "evt-dup", at)
				if err != nil {
					t.Error(err)
				}
				if added {
					applied.Add(1)
				}
			})
		}
		wg.Wait()
		if n := applied.Load(); n != 1 {
			t.Fatalf("%d of 50 duplicate adds applied, want 1", n)
		}
		if n := count(t, c, "acme", "tokens", at); n != 7 {
			t.Fatalf("count %d after 50 duplicates of one event, want 7", n)
		}
	})
}

func TestDifferentEventsAreSummed(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newCounters(t, rdb, usage.Config{})
		at := today().Add(2 * time.Hour)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if _, err := c.Add(t.Context(), "acme", "jobs", int64(i+1), "evt-"+string(rune('a'+i)), at); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := count(t, c, "acme", "jobs", at); n != 210 {
			t.Fatalf("count %d after events worth 1..20, want 210", n)
		}
		// One event may count once in each of several counters; tenants
		// are counted apart.
		add(t, c, "acme", "tokens", 500, "evt-a", at)
		add(t, c, "globex", "jobs", 1, "evt-a", at)
		days, err := c.Get(t.Context(), "acme", at, at)
		if err != nil {
			t.Fatal(err)
		}
		if got := days[0].Counts; len(got) != 2 || got["jobs"] != 210 || got["tokens"] != 500 {
			t.Fatalf("acme's counts %v, want jobs 210 and tokens 500", got)
		}
		if n := count(t, c, "globex", "jobs", at); n != 1 {
			t.Fatalf("globex's count %d, want 1", n)
		}
	})
}

// Days are UTC days, whatever the zone of the time given.
func TestCountsPerUTCDay(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newCounters(t, rdb, usage.Config{})
		day := today().AddDate(0, 0, -2)
		newYork := time.FixedZone("UTC-5", -5*3600)
		tokyo := time.FixedZone("UTC+9", 9*3600)
		// 23:30 on the day before in New York is 04:30 UTC on day.
		add(t, c, "acme", "jobs", 1, "ny", day.Add(4*time.Hour+30*time.Minute).In(newYork))
		// 08:30 on the day after in Tokyo is 23:30 UTC on day.
		add(t, c, "acme", "jobs", 10, "tokyo", day.Add(23*time.Hour+30*time.Minute).In(tokyo))
		// The first instant of the next UTC day.
		add(t, c, "acme", "jobs", 100, "midnight", day.AddDate(0, 0, 1))

		days, err := c.Get(t.Context(), "acme", day.AddDate(0, 0, -1).In(tokyo), day.AddDate(0, 0, 1).In(newYork))
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{0, 11, 100}
		if len(days) != len(want) {
			t.Fatalf("%d days, want %d", len(days), len(want))
		}
		for i, d := range days {
			if wantDate := day.AddDate(0, 0, i-1); !d.Date.Equal(wantDate) || d.Date.Location() != time.UTC {
				t.Fatalf("day %d is %v, want %v UTC", i, d.Date, wantDate)
			}
			if d.Counts["jobs"] != want[i] {
				t.Fatalf("%s: %d jobs, want %d", d.Date.Format(time.DateOnly), d.Counts["jobs"], want[i])
			}
		}
		// The keys themselves are named by the UTC date.
		if n := rdb.HGet(t.Context(), ks.UsageDay("acme", day), "jobs").Val(); n != "11" {
			t.Fatalf("hash of %s holds %q, want 11", day.Format(time.DateOnly), n)
		}
	})
}

// A retry with a different n is a caller's bug: refused, and the first
// write stands.
func TestConflictingRetryIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newCounters(t, rdb, usage.Config{})
		at := today().Add(time.Hour)
		add(t, c, "acme", "jobs", 2, "evt-1", at)
		added, err := c.Add(t.Context(), "acme", "jobs", 5, "evt-1", at)
		if added || !errors.Is(err, usage.ErrConflict) || !strings.Contains(err.Error(), "n 2, now 5") {
			t.Fatalf("retry with another n: %v, %v; want ErrConflict", added, err)
		}
		if n := count(t, c, "acme", "jobs", at); n != 2 {
			t.Fatalf("count %d, want the first write's 2", n)
		}
	})
}

// The approximate side, as documented: once an event's mark has expired,
// a retry counts again.
func TestRetryAfterMarkTTLCountsAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newCounters(t, rdb, usage.Config{MarkTTL: 100 * time.Millisecond})
		at := today().Add(time.Hour)
		add(t, c, "acme", "jobs", 1, "evt-1", at)
		pttl := rdb.PTTL(t.Context(), ks.UsageSeen("acme", at)).Val()
		if pttl <= 0 || pttl > 100*time.Millisecond {
			t.Fatalf("mark pttl %v, want within (0, 100ms]", pttl)
		}
		testenv.Eventually(t, 5*time.Second, func() bool {
			return rdb.Exists(t.Context(), ks.UsageSeen("acme", at)).Val() == 0
		}, "mark never expired")
		if !add(t, c, "acme", "jobs", 1, "evt-1", at) {
			t.Fatal("retry after the mark expired not applied")
		}
		if n := count(t, c, "acme", "jobs", at); n != 2 {
			t.Fatalf("count %d, want 2: the late retry double-counts", n)
		}
	})
}

func TestDayCountsExpireAfterRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newCounters(t, rdb, usage.Config{Retention: 48 * time.Hour})
		day := today().AddDate(0, 0, -1)
		add(t, c, "acme", "jobs", 1, "evt-1", day.Add(time.Hour))
		// Dropped at the end of day, plus 48 hours: 72 hours from its start.
		dropAt := day.Add(72 * time.Hour)
		pttl := rdb.PTTL(t.Context(), ks.UsageDay("acme", day)).Val()
		if left := time.Until(dropAt); pttl < left-time.Minute || pttl > left+time.Minute {
			t.Fatalf("day pttl %v, want about %v", pttl, left)
		}
		// A day already dropped is refused, not counted into nothing.
		old := today().AddDate(0, 0, -3).Add(time.Hour)
		added, err := c.Add(t.Context(), "acme", "jobs", 1, "evt-old", old)
		if added || !errors.Is(err, usage.ErrInvalid) || !strings.Contains(err.Error(), "retention") {
			t.Fatalf("add to a day past retention: %v, %v; want ErrInvalid", added, err)
		}
		if n := rdb.Exists(t.Context(), ks.UsageSeen("acme", old)).Val(); n != 0 {
			t.Fatal("a refused add left a mark")
		}
	})
}

func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	c, _ := newCounters(t, rdb, usage.Config{})
	at := today()
	for _, in := range []struct {
		tenant, counter string
		n               int64
		id              string
		at              time.Time
		why             string
	}{
		{"", "jobs", 1, "e", at, "tenant must be"},
		{"a{b}", "jobs", 1, "e", at, "braces"},
		{"acme", "", 1, "e", at, "counter must be"},
		{"acme", "jobs:x", 1, "e", at, "colons"},
		{"acme", "jobs", 1, "", at, "event id must be"},
		{"acme", "jobs", 1, strings.Repeat("e", 257), at, "event id must be"},
		{"acme", "jobs", 0, "e", at, "at least 1"},
		{"acme", "jobs", 1, "e", time.Time{}, "no time"},
	} {
		if _, err := c.Add(t.Context(), in.tenant, in.counter, in.n, in.id, in.at); !errors.Is(err, usage.ErrInvalid) || !strings.Contains(err.Error(), in.why) {
			t.Errorf("Add(%q, %q, %d, %.10q, %v): %v; want ErrInvalid saying %s", in.tenant, in.counter, in.n, in.id, in.at, err, in.why)
		}
	}
	if _, err := c.Get(t.Context(), "acme", at, at.AddDate(0, 0, -1)); !errors.Is(err, usage.ErrInvalid) {
		t.Errorf("Get with to before from: %v, want ErrInvalid", err)
	}
	if _, err := c.Get(t.Context(), "acme", at.AddDate(0, 0, -usage.MaxDays), at); !errors.Is(err, usage.ErrInvalid) {
		t.Errorf("Get of %d days: %v, want ErrInvalid", usage.MaxDays+1, err)
	}
	if _, err := usage.New(nil, usage.Config{}); !errors.Is(err, usage.ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	if _, err := usage.New(store.New(rdb, store.Config{}), usage.Config{MarkTTL: -time.Second}); !errors.Is(err, usage.ErrInvalid) {
		t.Errorf("negative MarkTTL: %v, want ErrInvalid", err)
	}
}

// AddEach counts each of many events once, in one script, and their marks
// are fields of one hash per tenant and day, not a key each; a retry
// whose time crossed a midnight finds its mark of the day either side.
//
// Fails when a mark is looked up in its own day alone (the retry after
// midnight counts again).
func TestAddEachMarksInOneHashPerDay(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newCounters(t, rdb, usage.Config{})
		at := today().Add(time.Hour)
		events := make([]usage.Event, 500)
		for i := range events {
			events[i] = usage.Event{ID: fmt.Sprintf("evt-%d", i), At: at}
		}
		for range 2 { // the second time: every one a retry
			if err := c.AddEach(t.Context(), "acme", "jobs", 3, events); err != nil {
				t.Fatal(err)
			}
			if n := count(t, c, "acme", "jobs", at); n != 1500 {
				t.Fatalf("count %d, want 500 events of 3", n)
			}
		}
		if n := rdb.HLen(t.Context(), ks.UsageSeen("acme", at)).Val(); n != 500 {
			t.Fatalf("%d marks in the day's hash, want 500", n)
		}
		if add(t, c, "acme", "jobs", 3, "evt-7", at.Add(24*time.Hour)) || add(t, c, "acme", "jobs", 3, "evt-8", at.Add(-24*time.Hour)) {
			t.Fatal("a retry a day away counted again")
		}
		if err := c.AddEach(t.Context(), "acme", "jobs", 4, events[:1]); !errors.Is(err, usage.ErrConflict) {
			t.Fatalf("a retry with another n: %v, want ErrConflict", err)
		}
	})
}

// AddAll does several adds in one round trip, each as AddEach: events of
// two days in one add each count on their own day, an event repeated in
// one add counts once, and an add refused (a bad counter) is refused alone.
//
// Fails when the events of one add are counted by the day of the first
// alone, or a repeat within one script counts twice.
func TestAddAllCountsEachAddOnItsOwn(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, _ := newCounters(t, rdb, usage.Config{})
		at := today().Add(time.Hour)
		twoDays := []usage.Event{{ID: "a", At: at}, {ID: "b", At: at.Add(-24 * time.Hour)}, {ID: "a", At: at}, {ID: "c", At: at}}
		errs := c.AddAll(t.Context(), []usage.Add{
			{Tenant: "acme", Counter: "runs", N: 2, Events: twoDays},
			{Tenant: "globex", Counter: "runs", N: 1, Events: []usage.Event{{ID: "a", At: at}}},
			{Tenant: "acme", Counter: "bad:name", N: 1, Events: []usage.Event{{ID: "x", At: at}}},
			{Tenant: "acme", Counter: "runs", N: 2, Events: []usage.Event{{ID: "", At: at}}}, // one script with the first, but bad
		})
		if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], usage.ErrInvalid) || !errors.Is(errs[3], usage.ErrInvalid) {
			t.Fatalf("errors %v, want nil, nil, ErrInvalid, ErrInvalid", errs)
		}
		for _, tc := range []struct {
			tenant string
			day    time.Time
			want   int64
		}{{"acme", at, 4}, {"acme", at.Add(-24 * time.Hour), 2}, {"globex", at, 1}} {
			if n := count(t, c, tc.tenant, "runs", tc.day); n != tc.want {
				t.Errorf("%s on %s: %d, want %d", tc.tenant, tc.day.Format(time.DateOnly), n, tc.want)
			}
		}
		if errs := c.AddAll(t.Context(), []usage.Add{{Tenant: "acme", Counter: "runs", N: 2, Events: twoDays}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if n := count(t, c, "acme", "runs", at); n != 4 {
			t.Fatalf("a retried AddAll counted again: %d, want 4", n)
		}
	})
}

// An event counted by a version before the marks were digests, under the
// mark "<counter>:<event id>", is not counted again by this one (an
// upgrade runs both side by side): a retry finds that mark on its day and
// on the days either side, an event of the same batch without one counts,
// and a retry with another n is refused. This version writes a mark as 12
// bytes, which is all a mark costs.
//
// Fails when the marks of the versions before are not looked up (their
// events count twice), or the marks are written long again.
func TestMarksOfTheVersionBeforeAreFound(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, ks := newCounters(t, rdb, usage.Config{})
		ctx := t.Context()
		at := today().Add(time.Hour)
		// What the version before wrote for evt-old, counted with n 3.
		if err := rdb.HSet(ctx, ks.UsageSeen("acme", at), "jobs:evt-old", "3").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HIncrBy(ctx, ks.UsageDay("acme", at), "jobs", 3).Err(); err != nil {
			t.Fatal(err)
		}
		events := []usage.Event{{ID: "evt-old", At: at}, {ID: "evt-new", At: at}}
		if err := c.AddEach(ctx, "acme", "jobs", 3, events); err != nil {
			t.Fatal(err)
		}
		if n := count(t, c, "acme", "jobs", at); n != 6 {
			t.Fatalf("count %d, want 6: evt-old counted once before, evt-new now", n)
		}
		if add(t, c, "acme", "jobs", 3, "evt-old", at.Add(24*time.Hour)) || add(t, c, "acme", "jobs", 3, "evt-old", at.Add(-24*time.Hour)) {
			t.Fatal("a retry a day away from the old mark counted again")
		}
		if _, err := c.Add(ctx, "acme", "jobs", 4, "evt-old", at); !errors.Is(err, usage.ErrConflict) || !strings.Contains(err.Error(), "n 3, now 4") {
			t.Fatalf("a retry with another n: %v, want ErrConflict", err)
		}
		// Another counter's event of the same id has a mark of its own.
		if !add(t, c, "acme", "runs", 3, "evt-old", at) {
			t.Fatal("runs/evt-old taken as counted: jobs/evt-old's mark is not its")
		}
		fields, err := rdb.HKeys(ctx, ks.UsageSeen("acme", at)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(fields) != 3 {
			t.Fatalf("%d marks, want the old one and 2 new", len(fields))
		}
		for _, f := range fields {
			if f != "jobs:evt-old" && len(f) != 12 {
				t.Errorf("mark %q of %d bytes, want 12", f, len(f))
			}
		}
	})
}

// Calls made while a write is out are written together once it is back,
// one script for those of one tenant, counter and n, and each returns its
// own outcome: a duplicate event among them counts once (one of its calls
// is told added), bad input fails only its own call, and a call whose
// context ends while it waits returns at once.
//
// Fails when calls are not gathered (a script each: many times the
// commands), or a group's outcomes reach the wrong callers.
func TestCallsWhileAWriteIsOutShareOneScript(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	c, _ := newCounters(t, rdb, usage.Config{})
	at := today().Add(time.Hour)
	release := c.HoldWrites()
	var wg sync.WaitGroup
	var added atomic.Int64
	errs := make(chan error, 64)
	call := func(id string) {
		wg.Go(func() {
			ok, err := c.Add(t.Context(), "acme", "runs", 1, id, at)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
			}
			if ok {
				added.Add(1)
			}
		})
	}
	for i := range 30 {
		call(fmt.Sprint("job-", i))
	}
	for range 5 {
		call("dup")
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Waiting() == 35 }, "calls not gathered")
	if err := c.AddEach(t.Context(), "acme", "bad:name", 1, []usage.Event{{ID: "x", At: at}}); !errors.Is(err, usage.ErrInvalid) {
		t.Fatalf("bad counter while waiting: %v, want ErrInvalid at once", err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.AddEach(ctx, "acme", "runs", 1, []usage.Event{{ID: "late", At: at}}) }()
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Waiting() == 36 }, "late call not gathered")
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}

	before := testenv.CommandsExecuted(t, rdb)
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := added.Load(); n != 31 {
		t.Errorf("%d calls told added, want 31 (30 events and one of the 5 duplicates)", n)
	}
	if n := testenv.CommandsExecuted(t, rdb) - before; n > 15 {
		t.Errorf("36 calls written with %d Redis commands: not one script", n)
	}
	// The cancelled call had joined the group: its event counts with it.
	if n := count(t, c, "acme", "runs", at); n != 32 {
		t.Fatalf("count %d, want 32", n)
	}
}

// The call that writes a group (the first to join it) may give up while
// it waits for the write that is out: the group is written all the same,
// and the other calls of it get their own outcome, not its cancellation.
//
// Fails when the group is written under the first call's context (every
// call of it fails with context.Canceled, and nothing is counted).
func TestAGroupIsWrittenWhenItsFirstCallGivesUp(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	c, _ := newCounters(t, rdb, usage.Config{})
	at := today().Add(time.Hour)
	release := c.HoldWrites()
	ctx, stop := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { _, err := c.Add(ctx, "acme", "runs", 1, "first", at); first <- err }()
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Waiting() == 1 }, "first call not gathered")
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Go(func() {
			if _, err := c.Add(t.Context(), "acme", "runs", 1, fmt.Sprint("job-", i), at); err != nil {
				errs <- err
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Waiting() == 4 }, "calls not gathered")
	stop()
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call of the group: %v, want it counted", err)
	}
	if err := <-first; err != nil {
		t.Errorf("the first call, its event counted: %v", err)
	}
	if n := count(t, c, "acme", "runs", at); n != 4 {
		t.Fatalf("count %d, want 4", n)
	}
}

// After Redis lost its script cache (SCRIPT FLUSH, as a restart or a
// failover leaves it), AddAll's pipelined scripts still count each event,
// once.
func TestAddAllAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := t.Context()
	c, err := usage.New(store.New(rdb, store.Config{Prefix: testenv.Prefix(t)}), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, tenant := range []string{"acme", "globex", "acme"} {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		adds := []usage.Add{{Tenant: tenant, Counter: "executions", N: 1, Events: []usage.Event{{ID: fmt.Sprint("e", i), At: now}}}}
		if errs := c.AddAll(ctx, adds); errors.Join(errs...) != nil {
			t.Fatalf("AddAll after SCRIPT FLUSH: %v", errs)
		}
	}
	days, err := c.Get(ctx, "acme", now, now)
	if err != nil || len(days) != 1 || days[0].Counts["executions"] != 2 {
		t.Fatalf("acme's usage: %+v, %v; want 2 executions", days, err)
	}
}
