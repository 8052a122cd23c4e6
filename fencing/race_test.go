package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
)

// Many writers race on one resource with random tokens. Whatever the order
// Redis runs them in, no write may be accepted with a token below one that
// was accepted before it started, and the last word belongs to the highest.
func TestRedisGuardConcurrentWrites(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := store.New(b.Client, store.Config{Prefix: testenv.Prefix(t)}).Fence()
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
