package job

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// canonical re-encodes JSON with object keys sorted and no white space, so
// key order and spacing do not make two bodies differ. Numbers stay as
// written (1.0 and 1 differ). It also returns the first two keys of one
// object that differ only in case (foldedDuplicate), or nil.
//
// Most JSON a client sends takes one pass over its bytes (canonWriter);
// the rest is decoded and encoded again by encoding/json, which is the
// definition of the form: FuzzCanonical holds the two to the same bytes.
func canonical(raw json.RawMessage) (json.RawMessage, []string, error) {
	w := canonWriter{in: raw, out: make([]byte, 0, len(raw))}
	if w.value(0) && w.end() {
		return w.out, nil, nil
	}
	var dup []string
	if a, b, found := foldedDuplicate(raw); found {
		dup = []string{a, b}
	}
	out, err := reencoded(raw)
	return out, dup, err
}

// reencoded is raw decoded (numbers as written) and encoded again.
func reencoded(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// foldedDuplicate finds two keys of one object, anywhere in raw, that are
// equal when case is ignored as encoding/json ignores it. The last of such
// keys wins in one decoder, and the one matching a field's case in
// another: {"model":"gpt-4o","MODEL":" "} could mean two models.
func foldedDuplicate(raw json.RawMessage) (first, second string, found bool) {
	type frame struct {
		keys      map[string]string // folded → as written; nil in an array
		expectKey bool
	}
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].expectKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false // io.EOF, or invalid JSON, which Validate reports
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{keys: map[string]string{}, expectKey: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if top := len(stack) - 1; top >= 0 && stack[top].keys != nil && stack[top].expectKey {
				folded := strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, t)
				if was, ok := stack[top].keys[folded]; ok {
					return was, t, true
				}
				stack[top].keys[folded] = t
				stack[top].expectKey = false
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

// maxCanonDepth is the deepest nesting canonWriter takes on; deeper JSON
// goes the slow way, which refuses it past encoding/json's own limit.
const maxCanonDepth = 1000

// maxCanonMembers is the most members of one object canonWriter takes on:
// it compares each key with those before it.
const maxCanonMembers = 32

// canonWriter appends to out the canonical form of the JSON in in, in one
// pass, for the JSON clients send: every string one that encoding/json
// writes back as it is (see string), every key ASCII, no two keys of an
// object equal when case is ignored, at most maxCanonMembers keys an
// object and maxCanonDepth levels. Anything else, invalid JSON included, stops it (a method
// returns false), and canonical takes the slow way.
type canonWriter struct {
	in      []byte
	pos     int
	out     []byte
	scratch []byte // an object's members while they are put in order
}

// member is one member of an object, as written to out: its key, without
// the quotes, is out[key:quote] (quote is its closing quote), and the
// whole member, quotes, colon and value, out[key-1:end].
type member struct{ key, quote, end int }

func (w *canonWriter) space() {
	for w.pos < len(w.in) && (w.in[w.pos] == ' ' || w.in[w.pos] == '\t' || w.in[w.pos] == '\n' || w.in[w.pos] == '\r') {
		w.pos++
	}
}

// end reports whether nothing but white space is left.
func (w *canonWriter) end() bool {
	w.space()
	return w.pos == len(w.in)
}

// next is the next byte after white space, or 0 at the end.
func (w *canonWriter) next() byte {
	w.space()
	if w.pos == len(w.in) {
		return 0
	}
	return w.in[w.pos]
}

func (w *canonWriter) value(depth int) bool {
	switch c := w.next(); {
	case depth > maxCanonDepth:
		return false
	case c == '{':
		return w.object(depth + 1)
	case c == '[':
		return w.array(depth + 1)
	case c == '"':
		return w.string(false)
	case c == '-' || '0' <= c && c <= '9':
		return w.number()
	}
	return w.literal("true") || w.literal("false") || w.literal("null")
}

func (w *canonWriter) literal(lit string) bool {
	if !strings.HasPrefix(string(w.in[w.pos:]), lit) {
		return false
	}
	w.out = append(w.out, lit...)
	w.pos += len(lit)
	return true
}

// number copies a number as written, once it has checked its grammar.
func (w *canonWriter) number() bool {
	in, i := w.in, w.pos
	digits := func() bool {
		from := i
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		return i > from
	}
	if in[i] == '-' {
		i++
	}
	if i < len(in) && in[i] == '0' {
		i++
	} else if !digits() {
		return false
	}
	if i < len(in) && in[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	w.out = append(w.out, in[w.pos:i]...)
	w.pos = i
	return true
}

// string copies a string that encoding/json would write back unchanged:
// its only escapes are \" \\ \b \f \n \r \t (encoding/json writes a \u
// escape back in another form). A key has no escape and is ASCII.
func (w *canonWriter) string(key bool) bool {
	in := w.in
	for i := w.pos + 1; i < len(in); {
		switch c := in[i]; {
		case c == '"':
			w.out = append(w.out, in[w.pos:i+1]...)
			w.pos = i + 1
			return true
		case c == '\\' && !key && i+1 < len(in) && strings.IndexByte(`"\\bfnrt`, in[i+1]) >= 0:
			i += 2
		case c < 0x20 || c == '\\':
			return false
		case c < utf8.RuneSelf:
			i++
		case key:
			return false
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return false
			}
			i += size
		}
	}
	return false
}

func (w *canonWriter) array(depth int) bool {
	w.pos++
	w.out = append(w.out, '[')
	if w.next() == ']' {
		w.pos++
		w.out = append(w.out, ']')
		return true
	}
	for {
		if !w.value(depth) {
			return false
		}
		switch w.next() {
		case ',':
			w.out = append(w.out, ',')
		case ']':
			w.pos++
			w.out = append(w.out, ']')
			return true
		default:
			return false
		}
		w.pos++
	}
}

// object copies an object's members, then puts them in the order of their
// keys if they were not.
func (w *canonWriter) object(depth int) bool {
	w.pos++
	start := len(w.out)
	w.out = append(w.out, '{')
	if w.next() == '}' {
		w.pos++
		w.out = append(w.out, '}')
		return true
	}
	var first [8]member
	members, sorted := first[:0], true
	for {
		if w.next() != '"' || len(members) == maxCanonMembers {
			return false
		}
		m := member{key: len(w.out) + 1}
		if !w.string(true) {
			return false
		}
		m.quote = len(w.out) - 1
		key := w.out[m.key:m.quote]
		for _, o := range members {
			if bytes.EqualFold(w.out[o.key:o.quote], key) {
				return false
			}
		}
		if n := len(members); n > 0 && bytes.Compare(w.out[members[n-1].key:members[n-1].quote], key) > 0 {
			sorted = false
		}
		if w.next() != ':' {
			return false
		}
		w.pos++
		w.out = append(w.out, ':')
		if !w.value(depth) {
			return false
		}
		m.end = len(w.out)
		members = append(members, m)
		c := w.next()
		if c == '}' {
			w.pos++
			break
		}
		if c != ',' {
			return false
		}
		w.pos++
		w.out = append(w.out, ',')
	}
	if !sorted {
		slices.SortFunc(members, func(a, b member) int {
			return bytes.Compare(w.out[a.key:a.quote], w.out[b.key:b.quote])
		})
		w.scratch = append(w.scratch[:0], w.out[start:]...)
		w.out = w.out[:start+1]
		for i, m := range members {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			w.out = append(w.out, w.scratch[m.key-1-start:m.end-start]...)
		}
	}
	w.out = append(w.out, '}')
	return true
}
