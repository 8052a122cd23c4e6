package scripts

import (
	"strings"
	"testing"
)

// The scripts keep every job's first state event without its data, and Go
// readers put SubmittedStateData back: the two copies must be the same
// bytes, or a replay shows the submit's event other than it was. (That the
// submit's move writes exactly states.lua's copy, so its record holds no
// data, is job's TestSubmitGetRoundTrip.)
func TestSubmittedStateDataIsStatesLuas(t *testing.T) {
	src, err := files.ReadFile("states.lua")
	if err != nil {
		t.Fatal(err)
	}
	if want := "local submitted = '" + SubmittedStateData + "'\n"; !strings.Contains(string(src), want) {
		t.Fatalf("states.lua has no line %q", want)
	}
}
