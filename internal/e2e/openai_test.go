package e2e

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestOpenAIClient runs the official openai npm package against the API
// binary, whose upstream is a fake one in this process (limit 2 on the
// model's key): its calls, streams and aborts work, never more than 2
// reach the upstream at once, and an aborted call closes its upstream call.
func TestOpenAIClient(t *testing.T) {
	t.Parallel()
	llm := fakellm.New(fakellm.Config{Delay: 5 * time.Millisecond})
	upstream := httptest.NewServer(llm)
	t.Cleanup(func() { llm.Close(); upstream.Close() })
	s := newSystem(t,
		"LEASEHOLD_LIMITS=model:fake=2",
		"LEASEHOLD_LLM_BASE_URL="+upstream.URL+"/v1",
	)
	dir := repoPath("internal", "e2e", "testdata", "openai-client")
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	env := append(slices.Clone(s.env), "LEASEHOLD_URL="+s.base, "LEASEHOLD_KEY="+s.key)
	for _, args := range [][]string{{"npm", "ci", "--prefer-offline", "--no-audit", "--no-fund"}, {"node", "--test"}} {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v in %s: %v (.ci/run installs nodejs and npm)\n%s", args, dir, err, &out)
		}
	}
	if peak := llm.PeakInFlight(); peak > 2 {
		t.Fatalf("%d calls at the upstream at once, limit 2", peak)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return llm.InFlight() == 0 && llm.Disconnects() >= 1 },
		"the aborted calls' upstream calls were not closed (%d in flight, %d disconnects)", llm.InFlight(), llm.Disconnects())
}
