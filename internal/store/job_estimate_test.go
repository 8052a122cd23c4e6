package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/job"
)

// chat is an llm.chat submission of model asking maxTokens (a JSON
// number, written as is).
func chat(model, maxTokens string) job.Submission {
	return job.Submission{Kind: "llm.chat",
		Input: []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":` + maxTokens + `}`)}
}

// refusedFields returns the fields a submit's *ValidationError names.
func refusedFields(err error) []string {
	var v *job.ValidationError
	if !errors.As(err, &v) {
		return nil
	}
	var fields []string
	for _, f := range v.Errors {
		fields = append(fields, f.Field)
	}
	return fields
}

// An llm.chat job's estimate, max_tokens plus its prompt, is bounded at
// submit: a max_tokens that would take it past MaxCostTokens (2^63-1,
// whose sum with the prompt would wrap negative, or a number beyond 64
// bits) is refused naming input.max_tokens, and so is an estimate above
// the whole tpm of one of its keys, as a cost.tokens is.
func TestSubmitBoundsTheChatEstimate(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		// "hi" with its quotes: a token, and 4 for its message.
		const prompt = 1 + 4
		if err := fx.store.SetKeyLimit(ctx, "model:m", job.KeyLimit{Budget: job.Budget{TPM: 10_000}}); err != nil {
			t.Fatal(err)
		}
		for _, mt := range []string{"9223372036854775807", "99999999999999999999999", fmt.Sprint(job.MaxCostTokens), fmt.Sprint(job.MaxCostTokens - prompt + 1)} {
			// Model u has no budget: the bound holds alone.
			_, _, err := fx.store.Submit(ctx, "acme", chat("u", mt), "")
			if f := refusedFields(err); len(f) != 1 || f[0] != "input.max_tokens" {
				t.Errorf("max_tokens %s: %v, want a refusal naming input.max_tokens", mt, err)
			}
		}
		// Within the bound, above the key's tpm.
		_, _, err := fx.store.Submit(ctx, "acme", chat("m", "10000"), "")
		if f := refusedFields(err); len(f) != 1 || f[0] != "input.max_tokens" {
			t.Errorf("an estimate above the key's tpm: %v, want a refusal naming input.max_tokens", err)
		}
		if err := fx.store.Check(ctx, "acme", chat("m", "10000")); err == nil {
			t.Error("Check took an estimate above the key's tpm")
		}
		j, _, err := fx.store.Submit(ctx, "acme", chat("m", fmt.Sprint(10_000-prompt)), "")
		if err != nil {
			t.Fatalf("an estimate of the whole tpm: %v", err)
		}
		if j.Cost == nil || j.Cost.Tokens != 10_000 {
			t.Errorf("estimate %+v, want 10000", j.Cost)
		}
		// A tenant's share of a key (per_tenant 1 of 4: 2,500 of its
		// 10,000 tpm) bounds what one job of the tenant may estimate.
		if err := fx.store.SetKeyLimit(ctx, "model:s", job.KeyLimit{Limit: ptr(4), Budget: job.Budget{TPM: 10_000, PerTenant: 1}}); err != nil {
			t.Fatal(err)
		}
		_, _, err = fx.store.Submit(ctx, "acme", chat("s", fmt.Sprint(2_500-prompt+1)), "")
		if f := refusedFields(err); len(f) != 1 || f[0] != "input.max_tokens" {
			t.Errorf("an estimate above the tenant's share of the tpm: %v, want a refusal naming input.max_tokens", err)
		}
		if _, _, err := fx.store.Submit(ctx, "acme", chat("s", fmt.Sprint(2_500-prompt)), ""); err != nil {
			t.Errorf("an estimate of the tenant's whole share: %v", err)
		}
	})
}
