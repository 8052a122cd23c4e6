package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// WithTypeScriptSDK calls f with the TypeScript SDK's folder (sdk/typescript)
// built: dist/ holds what its src/ compiles to. The examples and tests that
// run Node against dist/ (examples/node-handler, the SDK's own tests) run in
// several test processes at once, and npm ci rewrites node_modules/ and
// dist/: a lock on the folder, held until f returns, keeps one build from
// reading another half-written. f returns once its Node processes have
// loaded the SDK.
func WithTypeScriptSDK(t testing.TB, f func(dir string)) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "sdk", "typescript")
	lock, err := os.OpenFile(filepath.Join(dir, ".test.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if stale(dir) {
		// npm ci builds too: the package's prepare script runs tsc.
		cmd := exec.Command("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v (.ci/run installs nodejs and npm)\n%s", dir, err, out)
		}
	}
	f(dir)
}

// stale reports whether dir's dist/ is missing or older than a file of src/.
func stale(dir string) bool {
	built, err := os.Stat(filepath.Join(dir, "dist", "index.js"))
	if err != nil {
		return true
	}
	srcs, _ := filepath.Glob(filepath.Join(dir, "src", "*.ts"))
	for _, src := range srcs {
		if fi, err := os.Stat(src); err != nil || fi.ModTime().After(built.ModTime()) {
			return true
		}
	}
	return false
}
