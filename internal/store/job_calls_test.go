package store

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/store/keys"
)

// Each script call's layout against its script's header
// (internal/store/scripts/job_*.lua): how many KEYS and ARGV, and where the
// second item's keys and id go in a call of two. A key or an argument
// added in one place and not the other, or a per-item stride changed in
// one, fails here; the scripts' own tests catch the rest.
func TestScriptCallsLayOutWhatTheirScriptsRead(t *testing.T) {
	ks := keys.New("lh")
	items := []*submitting{{id: "j1"}, {id: "j2"}}
	for _, c := range []struct {
		name       string
		call       layouter
		keys, argv int
		key        int    // KEYS[key] (1-based) is
		keyWant    string // this key
		arg        int    // ARGV[arg] (1-based) is
		argWant    string // this argument
	}{
		// KEYS[9 + 5i + k], ARGV[6 + 17i + k], k=4 the folded key, k=0 the id
		{"submit", submitCall{tenant: "acme", queue: "q", items: items}, 8 + 5*2, 5 + 17*2,
			9 + 5 + 4, ks.JobFolded("q", "j2"), 6 + 17, "j2"},
		// KEYS[2 + 4i + 3] the folded key of job i (1..n), ARGV[4 + i] its id
		{"retry", retryCall{queue: "q", ids: []string{"j1", "j2"}, lanes: []string{"[]", "[]"}}, 5 + 4*2, 4 + 2,
			2 + 4*2 + 3, ks.JobFolded("q", "j2"), 4 + 2, "j2"},
		// ARGV[4] (cancel) and ARGV[7] (signal) the id
		{"cancel", cancelCall{queue: "q", id: "j1", lane: "[]"}, 11, 4, 11, ks.JobFolded("q", "j1"), 4, "j1"},
		{"signal", signalCall{queue: "q", id: "j1", lane: "[]", name: "go"}, 9, 7, 9, ks.JobFolded("q", "j1"), 7, "j1"},
		{"delete", deleteCall{queue: "q", id: "j1", tenant: "acme"}, 7, 3, 7, ks.QueueRetained("q", "acme"), 1, "j1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := c.call.layout(ks)
			if len(a.Keys) != c.keys || len(a.Argv) != c.argv {
				t.Fatalf("%d KEYS and %d ARGV, want %d and %d", len(a.Keys), len(a.Argv), c.keys, c.argv)
			}
			if got := a.Keys[c.key-1]; got != c.keyWant {
				t.Errorf("KEYS[%d] = %q, want %q", c.key, got, c.keyWant)
			}
			if got := fmt.Sprint(a.Argv[c.arg-1]); got != c.argWant {
				t.Errorf("ARGV[%d] = %q, want %q", c.arg, got, c.argWant)
			}
		})
	}
}
