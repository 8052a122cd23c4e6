package job

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
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
			if err != ErrBadCursor {
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

var streamIDPattern = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// Last-Event-ID (an event stream id) is accepted only as Redis writes one:
// <ms> or <ms>-<seq>, each fitting in 64 bits.
func FuzzLastEventID(f *testing.F) {
	for _, s := range []string{"0", "1795953600000-0", "1-18446744073709551615", "1-", "-1", "1-2-3", "+1", " 1", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := streamIDPattern.MatchString(id)
		if want {
			ms, seq, hasSeq := strings.Cut(id, "-")
			_, err1 := strconv.ParseUint(ms, 10, 64)
			_, err2 := strconv.ParseUint(seq, 10, 64)
			want = err1 == nil && (!hasSeq || err2 == nil)
		}
		if _, err := parseStreamID(id); (err == nil) != want {
			t.Fatalf("parseStreamID(%q) = %v, want valid %v", id, err, want)
		}
	})
}

// A limit key is accepted only in the documented forms: a concurrency key,
// or <prefix>:* with a prefix free of ':' and '*'.
func FuzzValidateLimitKey(f *testing.F) {
	for _, s := range []string{"model:gpt-4o", "tenant:*", "*", ":*", "a:b:*", "model:org/gpt", "x*y", "", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateLimitKey(key) != nil {
			return
		}
		if !concurrencyKeyPattern.MatchString(key) {
			t.Fatalf("%q accepted, yet does not match %s", key, concurrencyKeyPattern)
		}
		if prefix, ok := strings.CutSuffix(key, ":*"); ok {
			if prefix == "" || strings.ContainsAny(prefix, ":*") {
				t.Fatalf("wildcard %q accepted with prefix %q", key, prefix)
			}
		} else if strings.Contains(key, "*") {
			t.Fatalf("%q accepted with a '*' that is not a wildcard", key)
		}
	})
}
