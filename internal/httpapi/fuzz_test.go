package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/job"
)

// A submit body either decodes and validates, or is refused with a 400
// that names what is wrong; never a panic or another error. A body that
// is accepted still is after a round trip through its own JSON.
func FuzzSubmission(f *testing.F) {
	for _, s := range []string{
		`{"kind": "echo"}`,
		`{"kind": "llm.chat", "input": {"model": "gpt-4o", "messages": []}, "concurrency_keys": ["model:gpt-4o"], "priority": 5, "max_attempts": 3, "timeout": "10m", "max_wait": "5m", "delay": "0s", "on_busy": "reject", "metadata": {"a": 1}}`,
		`{"kind": "echo", "max_attempts": 0}`,
		`{"kind": "echo", "timeout": null}`,
		`{"kind": "echo", "input": null, "metadata": null}`,
		`{"kind": 1, "bogus": true}`,
		`[]`, `null`, `{"kind": "echo"} {}`, `{"kind": "echo", "timeout": "-1s"}`,
		`{"kind": "llm.chat", "input": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9223372036854775807}}`,
		`{"kind": "llm.chat", "input": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 999999995}}`,
		`{"kind": "llm.chat", "input": {"messages": [{"content": "` + strings.Repeat("x", 400) + `"}], "max_tokens": 999999990}, "cost": {"tokens": 7}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sub, given, err := decodeSubmission(body)
		if err == nil {
			err = sub.ValidateGiven(given)
		}
		if err != nil {
			if !isBadRequest(err) {
				t.Fatalf("%q: %v is not a 400", body, err)
			}
			return
		}
		checkEstimate(t, body, sub)
		again, err := json.Marshal(sub)
		if err != nil {
			t.Fatalf("%q: marshal: %v", body, err)
		}
		sub2, given2, err := decodeSubmission(again)
		if err == nil {
			err = sub2.Validate()
		}
		if err != nil {
			t.Fatalf("%q accepted, but its round trip %s is not: %v (%v)", body, again, err, given2)
		}
	})
}

// checkEstimate fails t unless an accepted submission's estimate is in
// [0, job.MaxCostTokens], and, for llm.chat, the prompt's plus a positive
// max_tokens is too.
func checkEstimate(t *testing.T, body []byte, sub job.Submission) {
	t.Helper()
	n := sub.Tokens()
	if n < 0 || n > job.MaxCostTokens {
		t.Fatalf("%q accepted with an estimate of %d tokens, want 0 to %d", body, n, job.MaxCostTokens)
	}
	if sub.Kind != "llm.chat" {
		return
	}
	var in struct {
		MaxTokens json.RawMessage `json:"max_tokens"`
	}
	_ = json.Unmarshal(sub.Input, &in)
	prompt := job.ChatPromptTokens(sub.Input)
	mt, err := strconv.ParseInt(string(in.MaxTokens), 10, 64)
	if errors.Is(err, strconv.ErrRange) || err == nil && mt > job.MaxCostTokens-prompt {
		t.Fatalf("%q accepted with max_tokens %s and a prompt of %d tokens: the estimate is above %d", body, in.MaxTokens, prompt, job.MaxCostTokens)
	}
	if prompt < 0 || sub.Cost == nil && err == nil && mt > 0 && n != prompt+mt {
		t.Fatalf("%q: estimate %d, want the prompt's %d plus max_tokens %d", body, n, prompt, mt)
	}
}

// The Idempotency-Key header is accepted once, as 1–255 printable ASCII
// characters; anything else is a 400 naming it.
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"k-1", "", " ", "ключ", "a\x00b", string(make([]byte, 256))} {
		f.Add(s, false)
	}
	f.Add("k", true)
	f.Fuzz(func(t *testing.T, key string, twice bool) {
		h := http.Header{"Idempotency-Key": {key}}
		if twice {
			h["Idempotency-Key"] = append(h["Idempotency-Key"], key)
		}
		got, err := idempotencyKey(h)
		want := !twice && len(key) >= 1 && len(key) <= 255
		for i := range len(key) {
			want = want && key[i] >= 0x20 && key[i] <= 0x7e
		}
		switch {
		case want && (err != nil || got != key):
			t.Fatalf("%q refused: %v", key, err)
		case !want && err == nil:
			t.Fatalf("%q (twice: %v) accepted", key, twice)
		case !want && !isBadRequest(err):
			t.Fatalf("%q: %v is not a 400", key, err)
		}
	})
}

// isBadRequest reports whether fail answers err with 400 naming what is
// wrong.
func isBadRequest(err error) bool {
	var bad *badRequest
	var invalid *job.ValidationError
	return errors.As(err, &bad) || errors.As(err, &invalid)
}

// decodeObject splits a body in place as json.Unmarshal into a map of raw
// members does, value for value and byte for byte, and refuses what
// Unmarshal refuses or finds not an object; arrayElements splits an array
// as Unmarshal into a slice of raw elements does.
func FuzzObjectMembers(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { "a" : 1 , "b":[1,{"c":"]}"}], "a": "last" } `, `{"\u0061\"": "x\"y\\", "é": null}`,
		`{"a": true, "b": false, "c": -1.5e3, "d": {"e": [[], {}]}}`, "{\"\xff\": 1}",
		`{"jobs": [ {"kind": "echo"} , 1, "two", [3], null ]}`, `[]`, `null`, `1`, `{"a": 1} {}`, `{"a": 1`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(body, &want) != nil || want == nil
		got, err := decodeObject(body)
		if (err != nil) != wantErr {
			t.Fatalf("%q: error %v, want one: %v", body, err, wantErr)
		}
		if err != nil {
			if !isBadRequest(err) {
				t.Fatalf("%q: %v is not a 400", body, err)
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d members, want %d", body, len(got), len(want))
		}
		for name, v := range want {
			if string(got[name]) != string(v) {
				t.Fatalf("%q: member %q is %q, want %q", body, name, got[name], v)
			}
			var elems []json.RawMessage
			if json.Unmarshal(v, &elems) != nil || elems == nil {
				continue
			}
			split := arrayElements(v)
			if len(split) != len(elems) {
				t.Fatalf("%q: %d elements, want %d", v, len(split), len(elems))
			}
			for i := range elems {
				if string(split[i]) != string(elems[i]) {
					t.Fatalf("%q: element %d is %q, want %q", v, i, split[i], elems[i])
				}
			}
		}
	})
}
