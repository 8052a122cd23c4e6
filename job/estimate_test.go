package job_test

import (
	"testing"

	"github.com/leasehold/leasehold/job"
)

// Tokens is from 0 to MaxCostTokens whatever the submission, validated or
// not.
func TestTokensIsBounded(t *testing.T) {
	for _, s := range []job.Submission{
		chat("u", "9223372036854775807"), chat("u", "-9223372036854775808"), chat("u", "1e30"), chat("u", `"5"`),
		{Kind: "llm.chat", Input: []byte(`[1]`)},
		{Kind: "echo", Cost: &job.Cost{Tokens: -5}}, {Kind: "echo", Cost: &job.Cost{Tokens: 1 << 62}},
	} {
		if n := s.Tokens(); n < 0 || n > job.MaxCostTokens {
			t.Errorf("%s %s %+v: estimate %d, want 0 to %d", s.Kind, s.Input, s.Cost, n, job.MaxCostTokens)
		}
	}
}

// chat is a chat submission to model, asking for maxTokens (JSON).
func chat(model, maxTokens string) job.Submission {
	return job.Submission{Kind: "llm.chat",
		Input: []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":` + maxTokens + `}`)}
}
