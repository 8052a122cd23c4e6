package scripts

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// Load leaves each comment line empty and every other line as it was, in
// its place: Redis's error messages name the lines of the files.
func TestUncommentedKeepsTheCodeInItsLines(t *testing.T) {
	src := "-- a comment\nlocal a = 1 -- kept: code before it\n  -- indented\n\tlocal s = '-- a string'\n--\nreturn a"
	want := "\nlocal a = 1 -- kept: code before it\n\n\tlocal s = '-- a string'\n\nreturn a"
	if got := string(uncommented(nil, []byte(src))); got != want {
		t.Fatalf("uncommented:\n%q\nwant\n%q", got, want)
	}
}

// uncommented reads a line that starts with "--" as a comment: in a long
// string, or in a block comment's later lines, it would be something
// else. No script has long brackets, so none has either.
func TestScriptsHaveNoLongBrackets(t *testing.T) {
	long := regexp.MustCompile(`\[=*\[`)
	names, err := fs.Glob(files, "*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if long.MatchString(line) {
				t.Errorf("%s:%d has a long bracket: %s", name, i+1, line)
			}
		}
	}
}
