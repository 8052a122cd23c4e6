package store

import (
	"testing"

	"github.com/leasehold/leasehold/job"
)

// A list cursor that parses names a position that writes back as a cursor
// that parses to the same position; anything else is ErrBadCursor.
func FuzzParseCursor(f *testing.F) {
	f.Add("")
	f.Add((&position{created: 1795953600000, id: "0190b6a0-0000-7000-8000-0000000000e1"}).cursor())
	f.Add("MTc5NTk1MzYwMDAwMDo")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, c string) {
		p, err := parseCursor(c)
		if err != nil {
			if err != job.ErrBadCursor {
				t.Fatalf("parseCursor(%q) = %v, want ErrBadCursor", c, err)
			}
			return
		}
		if p == nil {
			if c != "" {
				t.Fatalf("parseCursor(%q) = nil, nil", c)
			}
			return
		}
		again, err := parseCursor(p.cursor())
		if err != nil || *again != *p {
			t.Fatalf("cursor %q → %+v → %q → %+v, %v", c, *p, p.cursor(), again, err)
		}
	})
}
