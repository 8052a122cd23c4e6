package scripts

import (
	"maps"
	"regexp"
	"slices"
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

// Go's readers of a folded job resolve its packed state events and its
// dropped fields with EventFields and Implied, the scripts with
// transition.lua's event_names (finished_at, then shown_names) and
// implied: the copies must name the same fields in the same order, or a
// replay or a retry of a folded job shows other values, and a job read in
// Go another value than the scripts took.
func TestFoldNamesAreTransitionLuas(t *testing.T) {
	b, err := files.ReadFile("transition.lua")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	shown := regexp.MustCompile(`local function shown_names\(\)\s*return \{([^}]*)\}`).FindStringSubmatch(src)
	implied := regexp.MustCompile(`local function implied\(\)\s*return \{([^}]*)\}`).FindStringSubmatch(src)
	if shown == nil || implied == nil || !strings.Contains(src, "table.insert(names, 1, 'finished_at')") {
		t.Fatal("transition.lua's shown_names, event_names or implied is not as this test reads it")
	}
	names := []string{"finished_at"}
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(shown[1], -1) {
		names = append(names, m[1])
	}
	if !slices.Equal(names, EventFields) {
		t.Errorf("transition.lua's event_names: %q\nEventFields: %q", names, EventFields)
	}
	values := map[string]string{}
	for _, m := range regexp.MustCompile(`([a-z_]+) = '([^']*)'`).FindAllStringSubmatch(implied[1], -1) {
		values[m[1]] = m[2]
	}
	if !maps.Equal(values, Implied) {
		t.Errorf("transition.lua's implied: %v\nImplied: %v", values, Implied)
	}
}
