package cli_test

import (
	"bytes"
	"testing"

	"github.com/leasehold/leasehold/internal/cli"
)

func TestTextEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"newline and tab kept", []string{"a\tb\n"}, "a\tb\n"},
		{"ESC", []string{"\x1b[2J\x1b]0;title\a"}, `\u001b[2J\u001b]0;title\u0007`},
		{"carriage return and backspace", []string{"ok\rFAIL\b"}, `ok\u000dFAIL\u0008`},
		{"DEL and C1", []string{"\x7f\u009b31m\u0085"}, `\u007f\u009b31m\u0085`},
		{"UTF-8 kept", []string{"é€😀"}, "é€😀"},
		{"a character cut between writes", []string{"\xe2\x82", "\xac \xc2", "\x9b"}, `€ \u009b`},
		{"a byte that is not UTF-8", []string{"a\x9bb\xffc"}, "a\uFFFDb\uFFFDc"},
		{"JSON keeps its meaning", []string{`{"s":"` + "\u009b" + `"}`}, `{"s":"\u009b"}`},
	} {
		var buf bytes.Buffer
		w := cli.Text(&buf)
		for _, s := range c.writes {
			if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
				t.Fatalf("%s: Write(%q) = %d, %v", c.name, s, n, err)
			}
		}
		if got := buf.String(); got != c.want {
			t.Errorf("%s: wrote %q, want %q", c.name, got, c.want)
		}
	}
}
