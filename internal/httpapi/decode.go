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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
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
// members. A body that is one takes json.Unmarshal alone; the decoder
// that names what is wrong runs only for one that is not.
func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) == nil && raw != nil {
		return raw, nil
	}
	raw = nil
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(&raw)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return nil, &badRequest{detail: "the body is empty: want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, &badRequest{detail: "the body is truncated: the JSON ends before it is complete"}
	case errors.As(err, &syntax):
		return nil, &badRequest{detail: fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err)}
	case errors.As(err, &typ) && typ.Field == "":
		return nil, &badRequest{detail: "the body must be a JSON object, not " + typ.Value}
	case err != nil:
		return nil, &badRequest{detail: "malformed JSON: " + err.Error()}
	case raw == nil:
		return nil, &badRequest{detail: "the body must be a JSON object, not null"}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &badRequest{detail: "malformed JSON: more data follows the object"}
	}
	return raw, nil
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
		*r = raw // valid JSON already, and a copy of the body's bytes (decodeObject)
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
