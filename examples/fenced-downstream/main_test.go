package main

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

func TestRun(t *testing.T) {
	var out testenv.Buffer
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
