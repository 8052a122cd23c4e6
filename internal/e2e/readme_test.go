package e2e

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/fakellm"
)

// readmeCalls returns the curl lines of the README's first screen: the
// block that exports LEASEHOLD_URL and LEASEHOLD_KEY.
func readmeCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(repoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range strings.Split(string(b), "```") {
		if i%2 == 0 || !strings.Contains(block, "export LEASEHOLD_URL=") {
			continue // prose, or another block
		}
		var calls []string
		for l := range strings.Lines(block) {
			if strings.HasPrefix(l, "curl ") {
				calls = append(calls, strings.TrimSpace(l))
			}
		}
		return calls
	}
	t.Fatal("README.md has no block that exports LEASEHOLD_URL")
	return nil
}

// TestReadmeCalls runs the curl lines of the README's first screen as
// written, with LEASEHOLD_URL and LEASEHOLD_KEY set, against the API
// binary: the job is accepted, and the OpenAI chat call is answered by the
// upstream.
func TestReadmeCalls(t *testing.T) {
	t.Parallel()
	llm := fakellm.New(fakellm.Config{})
	upstream := httptest.NewServer(llm)
	t.Cleanup(func() { llm.Close(); upstream.Close() })
	s := newSystem(t, "LEASEHOLD_LLM_BASE_URL="+upstream.URL+"/v1")
	env := append(slices.Clone(s.env), "LEASEHOLD_URL="+s.base, "LEASEHOLD_KEY="+s.key)

	calls := readmeCalls(t)
	var submitted, chatted bool
	for _, call := range calls {
		cmd := exec.CommandContext(t.Context(), "bash", "-c", "set -eo pipefail\n"+call)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", call, err, out)
		}
		var reply struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(out, &reply); err != nil {
			t.Fatalf("%s printed no JSON object: %v\n%s", call, err, out)
		}
		switch {
		case strings.Contains(call, "/v1/jobs"):
			if reply.ID == "" || reply.State != "queued" {
				t.Fatalf("%s: want a queued job, got\n%s", call, out)
			}
			submitted = true
		case strings.Contains(call, "/v1/chat/completions"):
			if reply.Object != "chat.completion" || len(reply.Choices) != 1 || reply.Choices[0].Message.Content == "" {
				t.Fatalf("%s: want a chat completion, got\n%s", call, out)
			}
			chatted = true
		default:
			t.Fatalf("%s: a call this test does not know; check what it prints", call)
		}
	}
	if !submitted || !chatted {
		t.Fatalf("the README's first screen has %d curl lines (%q), want a job's submit and an OpenAI chat call", len(calls), calls)
	}
	if n := len(llm.Requests()); n != 1 {
		t.Fatalf("the upstream got %d calls, want the README's one", n)
	}
}
