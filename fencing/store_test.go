package fencing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestStoreWriteFences(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := fencing.NewStore(b.Client, fencing.StoreConfig{Prefix: testenv.Prefix(t)})

			mustWrite(t, s, "job-1", 7, "a")
			wantRecord(t, s, "job-1", 7, "a")

			// Stale: refused, and neither the value nor the highest moves.
			wantStale(t, s.Write(ctx, "job-1", 5, []byte("b")), 5, 7)
			wantRecord(t, s, "job-1", 7, "a")
			wantStale(t, s.Write(ctx, "job-1", 6, []byte("c")), 6, 7)
			wantRecord(t, s, "job-1", 7, "a")

			// Equal: the same owner writing again.
			mustWrite(t, s, "job-1", 7, "d")
			wantRecord(t, s, "job-1", 7, "d")

			// Higher: a new owner.
			mustWrite(t, s, "job-1", 9, "e")
			wantRecord(t, s, "job-1", 9, "e")
			wantStale(t, s.Write(ctx, "job-1", 8, []byte("f")), 8, 9)
			wantRecord(t, s, "job-1", 9, "e")

			// Resources are fenced independently.
			mustWrite(t, s, "job-2", 1, "g")
			wantRecord(t, s, "job-2", 1, "g")
		})
	}
}

func TestStoreAdmitMovesHighestNotValue(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := fencing.NewStore(b.Client, fencing.StoreConfig{Prefix: testenv.Prefix(t)})

			mustAdmit(t, s, "job-1", 7)
			wantRecord(t, s, "job-1", 0, "") // admitted, nothing written
			wantStale(t, s.Write(ctx, "job-1", 6, []byte("a")), 6, 7)
			mustWrite(t, s, "job-1", 7, "b")

			mustAdmit(t, s, "job-1", 9)
			// The value keeps the token it was written with.
			wantRecord(t, s, "job-1", 7, "b")
			wantStale(t, s.Admit(ctx, "job-1", 8), 8, 9)
			wantStale(t, s.Write(ctx, "job-1", 8, []byte("c")), 8, 9)
			wantRecord(t, s, "job-1", 7, "b")
			mustAdmit(t, s, "job-1", 9)
		})
	}
}

func TestStoreReadMissing(t *testing.T) {
	t.Parallel()
	s := fencing.NewStore(testenv.Redis(t).Client(t), fencing.StoreConfig{Prefix: testenv.Prefix(t)})
	rec, err := s.Read(t.Context(), "never-written")
	if err != nil || rec.Token != 0 || rec.Value != nil {
		t.Fatalf("Read of a missing resource = %+v, %v; want the zero Record, nil", rec, err)
	}
}

// Lua numbers are doubles: 2^53 and 2^53+1 are the same double. The scripts
// must still tell them apart, over the whole uint64 range.
func TestStoreTokensAbove2To53(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := fencing.NewStore(b.Client, fencing.StoreConfig{Prefix: testenv.Prefix(t)})
			const big = fencing.Token(1 << 53)

			mustWrite(t, s, "r", big+1, "a")
			wantStale(t, s.Write(ctx, "r", big, []byte("b")), big, big+1)
			wantStale(t, s.Write(ctx, "r", 999, []byte("b")), 999, big+1) // fewer digits
			wantRecord(t, s, "r", big+1, "a")
			mustWrite(t, s, "r", math.MaxUint64, "c")
			wantRecord(t, s, "r", math.MaxUint64, "c")
			wantStale(t, s.Admit(ctx, "r", math.MaxUint64-1), math.MaxUint64-1, math.MaxUint64)
		})
	}
}

func TestStoreInvalidInput(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			prefix := testenv.Prefix(t)
			s := fencing.NewStore(b.Client, fencing.StoreConfig{Prefix: prefix})

			for _, c := range []struct {
				name     string
				err      error
				resource string
				want     string
			}{
				{"write token 0", s.Write(ctx, "r", 0, []byte("v")), "r", "fencing: invalid input: token 0 (tokens are issued from 1)"},
				{"admit token 0", s.Admit(ctx, "r", 0), "r", "fencing: invalid input: token 0 (tokens are issued from 1)"},
				{"write empty resource", s.Write(ctx, "", 1, []byte("v")), "", "fencing: invalid input: empty resource name"},
				{"admit empty resource", s.Admit(ctx, "", 1), "", "fencing: invalid input: empty resource name"},
			} {
				if !errors.Is(c.err, fencing.ErrInvalid) || c.err.Error() != c.want {
					t.Errorf("%s: err = %v, want %q (ErrInvalid)", c.name, c.err, c.want)
				}
				if n := b.Client.Exists(ctx, keys.New(prefix).Fenced(c.resource)).Val(); n != 0 {
					t.Errorf("%s: the resource's key was written", c.name)
				}
			}
			if _, err := s.Read(ctx, ""); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("read empty resource: err = %v, want ErrInvalid", err)
			}
		})
	}
}

// Many writers race on one resource with random tokens. Whatever the order
// Redis runs them in, no write may be accepted with a token below one that
// was accepted before it started, and the last word belongs to the highest.
func TestStoreConcurrentWrites(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := fencing.NewStore(b.Client, fencing.StoreConfig{Prefix: testenv.Prefix(t)})
			highest, accepted := raceFence(t, 20, func(ctx context.Context, token fencing.Token, value string) error {
				return s.Write(ctx, "job", token, []byte(value))
			})
			rec, err := s.Read(t.Context(), "job")
			if err != nil {
				t.Fatal(err)
			}
			if rec.Token != highest || !accepted[string(rec.Value)] || tokenOf(t, string(rec.Value)) != highest {
				t.Fatalf("stored %d %q; want token %d and a value accepted with it", rec.Token, rec.Value, highest)
			}
		})
	}
}

// raceFence runs 64 goroutines that each call fence n times with values
// "<token>/<goroutine>/<i>". A token is a shared counter plus a random
// 0..15, so tokens climb as an issuer's do, arrive out of order and collide,
// and every call races near the highest token: uniform random tokens would
// all be refused once an early call drew the maximum. Every call is checked
// as it returns; raceFence gives back the highest accepted token and the
// accepted values.
func raceFence(t *testing.T, n int, fence func(ctx context.Context, token fencing.Token, value string) error) (fencing.Token, map[string]bool) {
	t.Helper()
	var (
		frontier    atomic.Uint64 // climbs with every call, like a token issuer
		maxAccepted atomic.Uint64 // raised after each accepted call returns
		mu          sync.Mutex
		accepted    = make(map[string]bool)
		wg          sync.WaitGroup
	)
	for g := range 64 {
		wg.Go(func() {
			for i := range n {
				token := fencing.Token(frontier.Add(1) + rand.Uint64N(16))
				value := fmt.Sprintf("%d/%d/%d", token, g, i)
				before := fencing.Token(maxAccepted.Load())
				err := fence(t.Context(), token, value)
				var stale *fencing.StaleError
				switch {
				case err == nil:
					if token < before {
						t.Errorf("token %d accepted after token %d had been", token, before)
					}
					for {
						cur := maxAccepted.Load()
						if uint64(token) <= cur || maxAccepted.CompareAndSwap(cur, uint64(token)) {
							break
						}
					}
					mu.Lock()
					accepted[value] = true
					mu.Unlock()
				case errors.As(err, &stale):
					if stale.Highest <= token || stale.Highest < before || stale.Token != token {
						t.Errorf("token %d (accepted max %d before the call) refused with %v", token, before, err)
					}
				default:
					t.Errorf("token %d: %v", token, err)
				}
			}
		})
	}
	wg.Wait()
	if len(accepted) == 0 {
		t.Fatal("no call was accepted")
	}
	return fencing.Token(maxAccepted.Load()), accepted
}

func tokenOf(t *testing.T, value string) fencing.Token {
	t.Helper()
	var token, g, i int
	if _, err := fmt.Sscanf(value, "%d/%d/%d", &token, &g, &i); err != nil {
		t.Fatalf("value %q: %v", value, err)
	}
	return fencing.Token(token)
}

func mustWrite(t *testing.T, s *fencing.Store, resource string, token fencing.Token, value string) {
	t.Helper()
	if err := s.Write(t.Context(), resource, token, []byte(value)); err != nil {
		t.Fatalf("write %s with token %d: %v", resource, token, err)
	}
}

func wantRecord(t *testing.T, s *fencing.Store, resource string, token fencing.Token, value string) {
	t.Helper()
	rec, err := s.Read(t.Context(), resource)
	if err != nil {
		t.Fatalf("read %s: %v", resource, err)
	}
	if rec.Token != token || !bytes.Equal(rec.Value, []byte(value)) {
		t.Fatalf("read %s = {%d %q}, want {%d %q}", resource, rec.Token, rec.Value, token, value)
	}
}

// wantStale checks that err is a *StaleError for token, reporting highest.
func wantStale(t *testing.T, err error, token, highest fencing.Token) {
	t.Helper()
	var stale *fencing.StaleError
	if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &stale) {
		t.Fatalf("err = %v, want a *StaleError matching ErrStale", err)
	}
	if stale.Token != token || stale.Highest != highest {
		t.Fatalf("stale error reports token %d, highest %d; want %d, %d", stale.Token, stale.Highest, token, highest)
	}
}
