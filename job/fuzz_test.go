package job

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var streamIDPattern = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

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

// canonical's one pass writes what encoding/json writes, byte for byte,
// and takes on no JSON that encoding/json refuses or that has two keys
// differing only in case.
func FuzzCanonical(f *testing.F) {
	for _, seed := range []string{
		`{}`, `[]`, `"s"`, `-0.5e+3`, `true`, `null`,
		`{"b":1,"a":[true,false,null,{"d":"x","c":-0.5E-3,"e":[]}],"aa":{},"a!":0}`,
		" { \"k\" : \"é<>&\x7f\" ,\n\t\"j\":[ 1 , 2 ] } ",
		`{"model":"gpt-4o","MODEL":1}`, `{"a":1,"a":2}`, `{"a":"\u0041"}`,
		`{"a":"\b\f\n\r\t\"\\ \/ \u00e9 \u0001 \ud83d\ude00"}`, `{"a":"\b\f\n\r\t\"\\"}`, "{\"a\":\"\u2028\"}", "{\"a\":\"\xff\"}", "{\"é\":1}",
		`{"a":1}x`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `[1,]`, `{"a":1,}`, `{"a"}`, `tru`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		w := canonWriter{in: []byte(raw)}
		if !w.value(0) || !w.end() {
			return // the slow way
		}
		if !json.Valid([]byte(raw)) {
			t.Fatalf("one pass took %q, which is not JSON", raw)
		}
		want, err := reencoded(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("one pass took %q, which encoding/json refuses: %v", raw, err)
		}
		if string(w.out) != string(want) {
			t.Fatalf("canonical %q: one pass %q, encoding/json %q", raw, w.out, want)
		}
		if a, b, found := foldedDuplicate(json.RawMessage(raw)); found {
			t.Fatalf("one pass took %q, whose keys %q and %q differ only in case", raw, a, b)
		}
	})
}

// What clients send, indented, unordered, with text in any language,
// takes canonical's one pass.
func TestCanonicalTakesClientJSONInOnePass(t *testing.T) {
	for _, raw := range []string{
		`{"n":1}`,
		`{"model": "gpt-4o", "messages": [{"role": "user", "content": "Grüß Gott, 日本語で <b>答えて</b> & \"quote\"?"}], "max_tokens": 256, "temperature": 0.2}`,
		"{\n  \"url\": \"https://example.com/a?b=c\",\n  \"retries\": [1, 2, 3],\n  \"nested\": {\"z\": null, \"y\": true}\n}",
	} {
		if w := (canonWriter{in: []byte(raw)}); !w.value(0) || !w.end() {
			t.Errorf("canonical %q went the slow way", raw)
		}
	}
}

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
		if _, err := ParseStreamID(id); (err == nil) != want {
			t.Fatalf("parseStreamID(%q) = %v, want valid %v", id, err, want)
		}
	})
}
