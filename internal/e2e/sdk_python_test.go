package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The Python SDK's own tests (sdk/python/tests, python3 -m unittest) run
// against the built binaries: an API and a worker on the test's Redis and
// NATS, an admin key beside the tenant's, and a key whose limit of 0
// refuses every job that asks to be rejected when busy (for 429).
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	const adminKey = "e2e-admin-0123456789abcdef"
	s := newSystem(t,
		"LEASEHOLD_API_KEYS=acme:e2e-key-0123456789abcdef,admin:"+adminKey,
		"LEASEHOLD_LIMITS=sdk:closed=0",
	)
	s.start("worker")
	dir := repoPath("sdk", "python")
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_URL="+s.base,
		"LEASEHOLD_KEY="+s.key,
		"LEASEHOLD_ADMIN_KEY="+adminKey,
		"PYTHONPATH="+filepath.Join(dir, "src"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in sdk/python: %v (.ci/run installs python3)\n%s", err, out)
	}
	t.Logf("python3 -m unittest in sdk/python:\n%s", out)
}
