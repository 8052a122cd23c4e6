package fencing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/fencing"
)

func TestMemoryFences(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var m fencing.Memory

	mustAdmit(t, &m, "job-1", 7)
	wantStale(t, m.Admit(ctx, "job-1", 5), 5, 7)
	wantStale(t, m.Admit(ctx, "job-1", 6), 6, 7) // 5 did not lower the highest
	mustAdmit(t, &m, "job-1", 7)                 // equal: the same owner again
	mustAdmit(t, &m, "job-1", 9)
	wantStale(t, m.Admit(ctx, "job-1", 8), 8, 9)
	mustAdmit(t, &m, "job-2", 1) // resources are fenced independently
}

func TestMemoryInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var m fencing.Memory
	mustAdmit(t, &m, "r", 5)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"token 0", m.Admit(ctx, "r", 0), "fencing: invalid input: token 0 (tokens are issued from 1)"},
		{"empty resource", m.Admit(ctx, "", 1), "fencing: invalid input: empty resource name"},
	} {
		if !errors.Is(c.err, fencing.ErrInvalid) || c.err.Error() != c.want {
			t.Errorf("%s: err = %v, want %q (ErrInvalid)", c.name, c.err, c.want)
		}
	}
	wantStale(t, m.Admit(ctx, "r", 4), 4, 5) // token 0 changed nothing
}

func TestMemoryConcurrentAdmit(t *testing.T) {
	t.Parallel()
	var m fencing.Memory
	// Memory's check-and-set takes nanoseconds: many calls give a broken
	// lock a chance to show.
	highest, _ := raceFence(t, 2000, func(ctx context.Context, token fencing.Token, _ string) error {
		return m.Admit(ctx, "job", token)
	})
	if highest < 2 {
		t.Fatalf("highest accepted token %d leaves nothing below it to probe with", highest)
	}
	wantStale(t, m.Admit(t.Context(), "job", 1), 1, highest)
}

func mustAdmit(t *testing.T, g fencing.Guard, resource string, token fencing.Token) {
	t.Helper()
	if err := g.Admit(t.Context(), resource, token); err != nil {
		t.Fatalf("admit %s with token %d: %v", resource, token, err)
	}
}
