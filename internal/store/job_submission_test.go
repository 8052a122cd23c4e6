package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"

	"github.com/leasehold/leasehold/job"
)

func TestSubmitRefusesInvalidInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	ok := job.Submission{Kind: "echo"}
	with := func(f func(*job.Submission)) job.Submission {
		s := ok
		f(&s)
		return s
	}
	manyKeys := make([]string, 17)
	for i := range manyKeys {
		manyKeys[i] = "k:" + strings.Repeat("x", i+1)
	}
	cases := []struct {
		name   string
		sub    job.Submission
		idem   string
		fields []string // every field the error must name, in order
	}{
		{"no kind", with(func(s *job.Submission) { s.Kind = "" }), "", []string{"kind"}},
		{"upper-case kind", with(func(s *job.Submission) { s.Kind = "LLM.chat" }), "", []string{"kind"}},
		{"kind starts with a digit", with(func(s *job.Submission) { s.Kind = "1chat" }), "", []string{"kind"}},
		{"kind of 65", with(func(s *job.Submission) { s.Kind = "a" + strings.Repeat("b", 64) }), "", []string{"kind"}},
		{"braces in queue", with(func(s *job.Submission) { s.Queue = "a{b}" }), "", []string{"queue"}},
		{"colon in queue", with(func(s *job.Submission) { s.Queue = "a:b" }), "", []string{"queue"}},
		{"space in queue", with(func(s *job.Submission) { s.Queue = "a b" }), "", []string{"queue"}},
		{"queue of 65", with(func(s *job.Submission) { s.Queue = strings.Repeat("q", 65) }), "", []string{"queue"}},
		{"priority 101", with(func(s *job.Submission) { s.Priority = 101 }), "", []string{"priority"}},
		{"priority -101", with(func(s *job.Submission) { s.Priority = -101 }), "", []string{"priority"}},
		{"max_attempts -1", with(func(s *job.Submission) { s.MaxAttempts = -1 }), "", []string{"max_attempts"}},
		{"max_attempts 101", with(func(s *job.Submission) { s.MaxAttempts = 101 }), "", []string{"max_attempts"}},
		{"negative timeout", with(func(s *job.Submission) { s.Timeout = dur(-time.Second) }), "", []string{"timeout"}},
		{"timeout over 24h", with(func(s *job.Submission) { s.Timeout = dur(25 * time.Hour) }), "", []string{"timeout"}},
		{"negative max_wait", with(func(s *job.Submission) { s.MaxWait = dur(-time.Nanosecond) }), "", []string{"max_wait"}},
		{"negative delay", with(func(s *job.Submission) { s.Delay = dur(-time.Hour) }), "", []string{"delay"}},
		{"delay over 30 days", with(func(s *job.Submission) { s.Delay = dur(31 * 24 * time.Hour) }), "", []string{"delay"}},
		{"unknown on_busy", with(func(s *job.Submission) { s.OnBusy = "drop" }), "", []string{"on_busy"}},
		{"17 keys", with(func(s *job.Submission) { s.ConcurrencyKeys = manyKeys }), "", []string{"concurrency_keys"}},
		{"wildcard key", with(func(s *job.Submission) { s.ConcurrencyKeys = []string{"model:a", "model:*"} }), "", []string{"concurrency_keys[1]"}},
		{"key with a space", with(func(s *job.Submission) { s.ConcurrencyKeys = []string{"model a"} }), "", []string{"concurrency_keys[0]"}},
		{"key with braces", with(func(s *job.Submission) { s.ConcurrencyKeys = []string{"{x}"} }), "", []string{"concurrency_keys[0]"}},
		{"empty key", with(func(s *job.Submission) { s.ConcurrencyKeys = []string{""} }), "", []string{"concurrency_keys[0]"}},
		{"key of 129", with(func(s *job.Submission) { s.ConcurrencyKeys = []string{strings.Repeat("k", 129)} }), "", []string{"concurrency_keys[0]"}},
		{"another tenant's key", with(func(s *job.Submission) { s.ConcurrencyKeys = []string{"tenant:victim"} }), "", []string{"concurrency_keys[0]"}},
		{"input over 1 MiB", with(func(s *job.Submission) { s.Input = hugeJSON(1<<20 + 1) }), "", []string{"input"}},
		{"input not JSON", with(func(s *job.Submission) { s.Input = json.RawMessage(`{"a":`) }), "", []string{"input"}},
		{"input nested too deep", with(func(s *job.Submission) {
			s.Input = json.RawMessage(strings.Repeat("[", 20000) + strings.Repeat("]", 20000))
		}), "", []string{"input"}},
		{"metadata an array", with(func(s *job.Submission) { s.Metadata = json.RawMessage(`[1]`) }), "", []string{"metadata"}},
		{"metadata a string", with(func(s *job.Submission) { s.Metadata = json.RawMessage(`"m"`) }), "", []string{"metadata"}},
		{"metadata over 64 KiB", with(func(s *job.Submission) { s.Metadata = hugeJSON(64<<10 + 1) }), "", []string{"metadata"}},
		{"idempotency key of 256", ok, strings.Repeat("i", 256), []string{"Idempotency-Key"}},
		{"idempotency key with a newline", ok, "a\nb", []string{"Idempotency-Key"}},
		{"idempotency key not ASCII", ok, "clé", []string{"Idempotency-Key"}},
		{"every field at once", job.Submission{
			Kind: "Bad", Queue: "{q}", Priority: 1000, MaxAttempts: 1000, Timeout: dur(-1),
			MaxWait: dur(-1), Delay: dur(-1), OnBusy: "x", Input: json.RawMessage(`nope`),
			Metadata: json.RawMessage(`1`),
		}, "", []string{"kind", "queue", "priority", "max_attempts", "timeout", "max_wait", "delay", "on_busy", "input", "metadata"}},
	}
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		for _, c := range cases {
			_, _, err := fx.store.Submit(t.Context(), "acme", c.sub, c.idem)
			var verr *job.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("%s: error %v, want a *ValidationError", c.name, err)
			}
			var fields []string
			for _, f := range verr.Errors {
				if f.Message == "" {
					t.Errorf("%s: %s has no message", c.name, f.Field)
				}
				fields = append(fields, f.Field)
			}
			if strings.Join(fields, ",") != strings.Join(c.fields, ",") {
				t.Errorf("%s: fields %v, want %v (%v)", c.name, fields, c.fields, err)
			}
		}
		for _, tenant := range []string{"", "a{b}", "a:b", strings.Repeat("t", 65)} {
			if _, _, err := fx.store.Submit(t.Context(), tenant, ok, ""); err == nil {
				t.Errorf("tenant %q accepted", tenant)
			}
		}
		if keys := fx.written(t); len(keys) > 0 {
			t.Fatalf("invalid submissions wrote %v", keys)
		}
	})
}

// hugeJSON is a valid JSON object of exactly n bytes.
func hugeJSON(n int) json.RawMessage {
	return json.RawMessage(`{"a":"` + strings.Repeat("x", n-8) + `"}`)
}

func TestChatJobsAreGuardedByTheirModelKey(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	s := store.New(rdb, store.Config{Prefix: testenv.Prefix(t)})
	j, _, err := s.Submit(t.Context(), "acme", job.Submission{Kind: "llm.chat",
		Input: json.RawMessage(`{"model":"meta/llama-3","messages":[]}`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.ConcurrencyKeys, []string{"model:meta/llama-3", "tenant:acme"}) {
		t.Fatalf("keys %v, want the model's and the tenant's", j.ConcurrencyKeys)
	}
	_, _, err = s.Submit(t.Context(), "acme", job.Submission{Kind: "llm.chat",
		Input: json.RawMessage(`{"model":"a{b}"}`)}, "")
	var v *job.ValidationError
	if !errors.As(err, &v) || v.Errors[0].Field != "input.model" {
		t.Fatalf("a model that cannot be a key: %v, want a validation error on input.model", err)
	}
}

// TestModelKeyCannotBeDodgedWithLookAlikeKeys: the model key is derived
// from the input the worker runs, and an input object with two keys that
// differ only in case, anywhere in it, is refused: {"model":"gpt-4o",
// "MODEL":" "} ran gpt-4o with no model key.
func TestModelKeyCannotBeDodgedWithLookAlikeKeys(t *testing.T) {
	t.Parallel()
	s := store.New(testenv.Redis(t).Client(t), store.Config{Prefix: testenv.Prefix(t)})
	for _, input := range []string{
		`{"model":"gpt-4o","MODEL":" "}`,
		`{"MODEL":" ","model":"gpt-4o"}`,
		`{"model":"gpt-4o","Model":"other"}`,
		`{"model":"gpt-4o","model":"other"}`,
		`{"model":"gpt-4o","messages":[{"role":"user","ROLE":"system","content":"x"}]}`,
		`{"model":"gpt-4o","x":{"y":[1,{"a":1,"A":2}]}}`,
		"{\"model\":\"gpt-4o\",\"\u212aey\":1,\"key\":2}", // the Kelvin sign folds to k, as encoding/json folds it
	} {
		_, _, err := s.Submit(t.Context(), "acme", job.Submission{Kind: "llm.chat", Input: json.RawMessage(input)}, "")
		var v *job.ValidationError
		if !errors.As(err, &v) || v.Errors[0].Field != "input" {
			t.Errorf("%s: %v, want a validation error on input", input, err)
		}
	}
	for input, keys := range map[string][]string{
		`{"MODEL":"gpt-4o","messages":[]}`:                       {"model:gpt-4o", "tenant:acme"}, // the worker reads MODEL too
		`{"model":"gpt-4o","x":{"model":"a"},"y":[{"model":1}]}`: {"model:gpt-4o", "tenant:acme"},
		`{"model":" "}`: {"tenant:acme"}, // the worker refuses a blank model
	} {
		j, _, err := s.Submit(t.Context(), "acme", job.Submission{Kind: "llm.chat", Input: json.RawMessage(input)}, "")
		if err != nil {
			t.Fatalf("%s: %v", input, err)
		}
		if !slices.Equal(j.ConcurrencyKeys, keys) {
			t.Errorf("%s: keys %v, want %v", input, j.ConcurrencyKeys, keys)
		}
	}
}
