package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/job"
)

// errUnsupportedMedia is a body that is not declared as JSON.
var errUnsupportedMedia = errors.New("httpapi: content type is not application/json")

// errBodyTimeout is a body that did not arrive within BodyTimeout: 408.
var errBodyTimeout = errors.New("httpapi: the body did not arrive in time")

// readJSONBody reads a request body declared as JSON, at most max bytes.
// It returns errUnsupportedMedia (415) for another content type,
// *http.MaxBytesError (413) for a larger body and errBodyTimeout (408) for
// one that did not arrive within BodyTimeout (see bodyDeadline).
func readJSONBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if !isJSON(r.Header.Get("Content-Type")) {
		return nil, errUnsupportedMedia
	}
	if r.ContentLength > max {
		return nil, &http.MaxBytesError{Limit: max}
	}
	// Read into a buffer of the declared length (at most max): ReadAll's
	// doublings would hold up to twice a large body for a moment.
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, max))
	body := buf.Bytes()
	if err != nil {
		var tooLarge *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooLarge):
			return nil, err
		case errors.As(err, &netErr) && netErr.Timeout():
			return nil, errBodyTimeout
		}
		return nil, &badRequest{detail: "could not read the body: " + err.Error()}
	}
	return body, nil
}

// isJSON accepts application/json, with no parameter but charset=utf-8.
func isJSON(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return false
	}
	for name, value := range params {
		if name != "charset" || !strings.EqualFold(value, "utf-8") {
			return false
		}
	}
	return true
}

// decodeSubmission parses a submit body (see decodeInto). given holds the
// fields the body named, for job.Submission.ValidateGiven: only a field
// left out takes its default.
func decodeSubmission(body []byte) (sub job.Submission, given map[string]bool, err error) {
	given, err = decodeInto(body, &sub)
	return sub, given, err
}

// decodeInto parses body, one JSON object, into the struct v points to,
// and returns the fields it named. Unlike json.Decoder with
// DisallowUnknownFields, which stops at the first problem and names no
// field for a bad duration, it reports every unknown field and every field
// of the wrong type, by name.
func decodeInto(body []byte, v any) (given map[string]bool, err error) {
	raw, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	return decodeMembers(raw, v)
}

// decodeMembers is decodeInto of an object already split into its members.
func decodeMembers(raw map[string]json.RawMessage, v any) (given map[string]bool, err error) {
	target := jsonFields(v)
	given = make(map[string]bool, len(raw))
	var fields []job.FieldError
	for name, value := range raw {
		field, ok := target(name)
		if !ok {
			fields = append(fields, job.FieldError{Field: name, Message: "unknown field"})
			continue
		}
		given[name] = true
		if msg := decodeField(value, field); msg != "" {
			fields = append(fields, job.FieldError{Field: name, Message: msg})
		}
	}
	if len(fields) > 0 {
		slices.SortFunc(fields, func(a, b job.FieldError) int { return strings.Compare(a.Field, b.Field) })
		return nil, &badRequest{detail: "the request has unknown fields or fields of the wrong type: see errors", fields: fields}
	}
	return given, nil
}

// decodeObject splits a body that must be exactly one JSON object into its
// members. A valid body is scanned once (json.Valid) and split in place
// (objectMembers); the decoder that names what is wrong runs only for one
// that is not.
func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(body) {
		return nil, notObject(body)
	}
	return validObject(bytes.TrimSpace(body))
}

// validObject is decodeObject of v, known to be one valid JSON value: a
// member or an element of a body decodeObject took.
func validObject(v []byte) (map[string]json.RawMessage, error) {
	if v[0] != '{' {
		return nil, notObject(v)
	}
	return objectMembers(v), nil
}

// notObject says why body is not one JSON object.
func notObject(body []byte) error {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(&raw)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &badRequest{detail: "the body is empty: want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &badRequest{detail: "the body is truncated: the JSON ends before it is complete"}
	case errors.As(err, &syntax):
		return &badRequest{detail: fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err)}
	case errors.As(err, &typ) && typ.Field == "":
		return &badRequest{detail: "the body must be a JSON object, not " + typ.Value}
	case err != nil:
		return &badRequest{detail: "malformed JSON: " + err.Error()}
	case raw == nil:
		return &badRequest{detail: "the body must be a JSON object, not null"}
	}
	return &badRequest{detail: "malformed JSON: more data follows the object"}
}

// objectMembers splits obj, a valid JSON object, into its members as
// json.Unmarshal into a map does (the last of a repeated name wins), each
// value a slice of obj rather than a copy: Unmarshal's own check and
// decode passes were a batch's costliest Go work, done twice for each item.
func objectMembers(obj []byte) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage)
	for i := skipSpace(obj, 1); obj[i] != '}'; {
		end := skipString(obj, i)
		name := unquote(obj[i:end])
		i = skipSpace(obj, skipSpace(obj, end)+1) // past the colon
		end = skipValue(obj, i)
		m[name] = obj[i:end]
		if i = skipSpace(obj, end); obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return m
}

// arrayElements splits arr, a valid JSON array, into its elements, each a
// slice of arr.
func arrayElements(arr []byte) []json.RawMessage {
	var elems []json.RawMessage
	for i := skipSpace(arr, 1); arr[i] != ']'; {
		end := skipValue(arr, i)
		elems = append(elems, arr[i:end])
		if i = skipSpace(arr, end); arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return elems
}

// skipValue returns the end of the valid JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		for depth := 0; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && !isDelimiter(b[i]) { // a number, true, false or null
		i++
	}
	return i
}

// skipString returns the end of the valid JSON string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDelimiter(c byte) bool { return c == ',' || c == '}' || c == ']' || isSpace(c) }

// unquote is the text of a valid JSON string. One with escapes or bytes
// that are not UTF-8 takes json.Unmarshal, which replaces those.
func unquote(s []byte) string {
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s[1 : len(s)-1])
	}
	var text string
	_ = json.Unmarshal(s, &text) // valid: it cannot fail
	return text
}

// jsonFields returns the field of the struct v points to by its JSON
// name, as a pointer to it, so a field added to job.Submission is accepted
// here at once.
func jsonFields(v any) func(name string) (field any, ok bool) {
	rv := reflect.ValueOf(v).Elem()
	index := jsonIndex(rv.Type())
	return func(name string) (any, bool) {
		i, ok := index[name]
		if !ok {
			return nil, false
		}
		return rv.Field(i).Addr().Interface(), true
	}
}

// jsonIndexes holds jsonIndex's maps, one a struct type: reading the tags
// of every field for each item was a sixth of a batch's decoding.
var jsonIndexes sync.Map // reflect.Type → map[string]int

// jsonIndex maps each JSON name of struct type t to its field's index.
func jsonIndex(t reflect.Type) map[string]int {
	if index, ok := jsonIndexes.Load(t); ok {
		return index.(map[string]int)
	}
	index := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			index[name] = i
		}
	}
	jsonIndexes.Store(t, index)
	return index
}

// decodeField decodes one member into target and says what is wrong with
// it, or "". null is a value only for raw JSON members (input, metadata);
// elsewhere it is refused, as the field's type has no null.
func decodeField(raw json.RawMessage, target any) string {
	if d, ok := target.(*job.Duration); ok {
		return decodeDuration(raw, d)
	}
	if r, ok := target.(*json.RawMessage); ok {
		*r = raw // valid JSON already (decodeObject)
		return ""
	}
	if string(raw) == "null" {
		return "must be " + describe(reflect.TypeOf(target).Elem()) + ", not null"
	}
	err := json.Unmarshal(raw, target)
	if err == nil {
		return ""
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return "must be " + describe(reflect.TypeOf(target).Elem())
	}
	return err.Error()
}

// decodeDuration reads a Go duration string, with messages that say what
// a duration looks like.
func decodeDuration(raw json.RawMessage, d *job.Duration) string {
	const want = `must be a duration string such as "30s" or "10m"`
	var s string
	if string(raw) == "null" {
		return want + ", not null"
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return want
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return want + ", not " + strconv.Quote(s)
	}
	*d = job.Duration(v)
	return ""
}

// describe names a JSON type for a message: "a string", "an integer".
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return describe(t.Elem())
	}
	return "of another type"
}
