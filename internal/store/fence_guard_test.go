package store

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestFenceWriteFences(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)}).Fence()

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

func TestFenceAdmitMovesHighestNotValue(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)}).Fence()

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

func TestFenceReadMissing(t *testing.T) {
	t.Parallel()
	s := New(testenv.Redis(t).Client(t), Config{Prefix: testenv.Prefix(t)}).Fence()
	rec, err := s.Read(t.Context(), "never-written")
	if err != nil || rec.Token != 0 || rec.Value != nil {
		t.Fatalf("Read of a missing resource = %+v, %v; want the zero Record, nil", rec, err)
	}
}

// Lua numbers are doubles: 2^53 and 2^53+1 are the same double. The scripts
// must still tell them apart, over the whole uint64 range.
func TestFenceTokensAbove2To53(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)}).Fence()
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

func TestFenceInvalidInput(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			prefix := testenv.Prefix(t)
			s := New(b.Client, Config{Prefix: prefix}).Fence()

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

func mustWrite(t *testing.T, s *Fence, resource string, token fencing.Token, value string) {
	t.Helper()
	if err := s.Write(t.Context(), resource, token, []byte(value)); err != nil {
		t.Fatalf("write %s with token %d: %v", resource, token, err)
	}
}

func wantRecord(t *testing.T, s *Fence, resource string, token fencing.Token, value string) {
	t.Helper()
	rec, err := s.Read(t.Context(), resource)
	if err != nil {
		t.Fatalf("read %s: %v", resource, err)
	}
	if rec.Token != token || !bytes.Equal(rec.Value, []byte(value)) {
		t.Fatalf("read %s = {%d %q}, want {%d %q}", resource, rec.Token, rec.Value, token, value)
	}
}

// wantStale checks that err is a *fencing.StaleError for token, reporting
// highest.
func wantStale(t *testing.T, err error, token, highest fencing.Token) {
	t.Helper()
	var e *fencing.StaleError
	if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &e) || e.Token != token || e.Highest != highest {
		t.Fatalf("err = %v, want a *fencing.StaleError of token %d, highest %d", err, token, highest)
	}
}

// Both fenced scripts run after Redis lost its script cache.
func TestFenceAfterScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	s := New(rdb, Config{Prefix: testenv.Prefix(t)}).Fence()
	ctx := t.Context()
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	mustWrite(t, s, "r", 5, "a")
	flush()
	wantStale(t, s.Admit(ctx, "r", 4), 4, 5)
	flush()
	if err := s.Admit(ctx, "r", 6); err != nil {
		t.Fatalf("admit after SCRIPT FLUSH: %v", err)
	}
	wantRecord(t, s, "r", 5, "a")
}

func mustAdmit(t *testing.T, s *Fence, resource string, token fencing.Token) {
	t.Helper()
	if err := s.Admit(t.Context(), resource, token); err != nil {
		t.Fatalf("admit %s with token %d: %v", resource, token, err)
	}
}
