package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/redisproc"
)

// The Python SDK's own tests (sdk/python/tests, python3 -m unittest) run
// against the built binaries: an API and a worker on the test's Redis and
// NATS, an admin key beside the tenant's, a key whose limit of 0 refuses
// every job that asks to be rejected when busy (for 429), a key with a tpm
// budget, and kinds the tests' own handlers serve (sdk/python/tests/
// test_handler.py) on a port chosen here, as the worker must know it.
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	const adminKey = "e2e-admin-0123456789abcdef"
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := newSystem(t,
		"LEASEHOLD_API_KEYS=acme:e2e-key-0123456789abcdef,admin:"+adminKey,
		"LEASEHOLD_LIMITS=sdk:closed=0,sdk:metered=;tpm=1000000",
		"LEASEHOLD_HANDLERS="+sdkHandlers(port, "sdk.agent", "sdk.pushback", "sdk.cancel", "sdk.sync"),
	)
	s.start("worker")
	dir := repoPath("sdk", "python")
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_URL="+s.base,
		"LEASEHOLD_KEY="+s.key,
		"LEASEHOLD_ADMIN_KEY="+adminKey,
		"LEASEHOLD_HANDLER_PORT="+strconv.Itoa(port),
		"PYTHONPATH="+filepath.Join(dir, "src"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in sdk/python: %v (.ci/run installs python3)\n%s", err, out)
	}
	t.Logf("python3 -m unittest in sdk/python:\n%s", out)
}

// sdkHandlers is a LEASEHOLD_HANDLERS value serving kinds at one local
// port: an SDK's App routes each call by its Leasehold-Kind header.
func sdkHandlers(port int, kinds ...string) string {
	pairs := make([]string, len(kinds))
	for i, k := range kinds {
		pairs[i] = k + "=http://127.0.0.1:" + strconv.Itoa(port) + "/"
	}
	return strings.Join(pairs, ",")
}
