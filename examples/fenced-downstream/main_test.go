package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

func TestRun(t *testing.T) {
	var out lockedBuffer
	if err := run(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		`service: stored result {"text":"fresh"} for job 42`,
		"new owner (token 7): 204 No Content",
		"paused worker (token 5): 409 Conflict",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "stale\"} for job") {
		t.Errorf("the stale result was stored:\n%s", got)
	}
}

// lockedBuffer is written by the handler's goroutine and by run's: the race
// detector cannot see the ordering the HTTP round trip gives them.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
