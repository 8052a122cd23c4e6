package cli

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// TextWriter writes what it is given to a terminal (or a pipe) with no
// control character but newline and tab: each other C0 character, DEL and
// each C1 character is written as the JSON escape \u00XX, and a byte that
// is not UTF-8 as U+FFFD. Job text (output, errors, results, metadata) is
// a tenant's, and a terminal acts on the escapes in it: it could rewrite
// what an operator sees, or set a window's title. The escape keeps JSON
// output's meaning, since control characters appear only inside its
// strings, where \u00XX is the same character.
type TextWriter struct {
	w    io.Writer
	tail []byte // the start of a character whose rest is still to come
}

// Text returns a TextWriter to w.
func Text(w io.Writer) *TextWriter { return &TextWriter{w: w} }

// Write writes p, its control characters escaped. A character cut
// between two writes is kept until its rest comes.
func (t *TextWriter) Write(p []byte) (int, error) {
	b := append(t.tail, p...)
	t.tail = nil
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1 && !utf8.FullRune(b):
			t.tail = append([]byte(nil), b...)
			b = nil
			continue
		case r == utf8.RuneError && size <= 1:
			out = utf8.AppendRune(out, utf8.RuneError)
		case control(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Raw is the writer under t, for the control characters the program
// writes itself (a carriage return to redraw a line).
func (t *TextWriter) Raw() io.Writer { return t.w }

// control reports whether r is a control character other than newline
// and tab.
func control(r rune) bool {
	return unicode.IsControl(r) && r != '\n' && r != '\t'
}
