package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestTypeScriptSDK builds the TypeScript SDK (sdk/typescript) as its users
// do, runs its own tests (node --test) against this system's API and
// worker, whose kinds sdk.* its handler tests serve on a port chosen here,
// and installs the package npm pack makes into a fresh project, which then
// submits a job with it.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	const adminKey = "e2e-admin-key-0123456789abcdef"
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := newSystem(t,
		"LEASEHOLD_LIMITS=sdk:gate=1,sdk:metered=;tpm=1000000",
		"LEASEHOLD_HANDLERS="+sdkHandlers(port, "sdk.agent", "sdk.pushback", "sdk.cancel", "sdk.fail"),
		"LEASEHOLD_QUEUES=default,sdk-list,sdk-admin",
		"LEASEHOLD_API_KEYS=acme:e2e-key-0123456789abcdef,admin:"+adminKey,
	)
	s.start("worker")
	env := append(slices.Clone(s.env),
		"LEASEHOLD_URL="+s.base,
		"LEASEHOLD_KEY="+s.key,
		"LEASEHOLD_ADMIN_KEY="+adminKey,
		"LEASEHOLD_HANDLER_PORT="+strconv.Itoa(port),
	)
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	// run answers the command's standard output; npm writes its scripts'
	// banners and notices to standard error.
	run := func(dir string, name string, args ...string) []byte {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %v in %s: %v (.ci/run installs nodejs and npm)\n%s%s", name, args, dir, err, &stdout, &stderr)
		}
		return stdout.Bytes()
	}
	tmp := t.TempDir()
	var packed []struct {
		Filename string `json:"filename"`
		Files    []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	testenv.WithTypeScriptSDK(t, func(dir string) {
		// npm ci builds the package too: its prepare script runs tsc.
		run(dir, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		t.Logf("npm test:\n%s", run(dir, "npm", "test"))
		if err := json.Unmarshal(run(dir, "npm", "pack", "--json", "--pack-destination", tmp), &packed); err != nil || len(packed) != 1 {
			t.Fatalf("npm pack --json: %v, %d packages", err, len(packed))
		}
	})
	var files []string
	for _, f := range packed[0].Files {
		files = append(files, f.Path)
	}
	for _, want := range []string{"package.json", "dist/index.js", "dist/index.d.ts", "dist/client.js"} {
		if !slices.Contains(files, want) {
			t.Errorf("the package lacks %s: %v", want, files)
		}
	}
	for _, f := range files {
		if filepath.Dir(f) != "." && filepath.Dir(f) != "dist" {
			t.Errorf("the package holds %s, which is neither the package's metadata nor its build", f)
		}
	}
	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(consumer, "package.json"), []byte(`{"private": true, "type": "module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(consumer, "npm", "install", "--offline", "--no-audit", "--no-fund", filepath.Join(tmp, packed[0].Filename))
	out := run(consumer, "node", "--input-type=module", "-e", `
		import { Client } from '@leasehold/sdk';
		const job = await new Client().submit({ kind: 'echo', input: { from: 'the packed package' } });
		console.log(JSON.stringify(job));
	`)
	var j jobView
	if err := json.Unmarshal(out, &j); err != nil || j.ID == "" {
		t.Fatalf("the packed package's submit printed %q (%v)", out, err)
	}
	s.waitState(j.ID, 30*time.Second, "succeeded")
}
