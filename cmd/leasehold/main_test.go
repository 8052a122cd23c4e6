package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redisproc"
)

// TestDevModeSmoke builds the dev binary, starts it as `make run` does,
// runs an echo job through the API and stops it with SIGINT — with a
// redis-server child and with the in-process stand-in.
func TestDevModeSmoke(t *testing.T) {
	if !redisproc.Installed() {
		t.Fatal(redisproc.InstallHint)
	}
	bin := filepath.Join(t.TempDir(), "leasehold")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, mode := range []string{"redis-server", "memory"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			port, err := redisproc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			addr := "127.0.0.1:" + strconv.Itoa(port)
			args := []string{"dev", "--addr", addr, "--metrics-addr", "127.0.0.1:0", "--data", t.TempDir()}
			if mode == "memory" {
				args = append(args, "--memory")
			}
			cmd := exec.Command(bin, args...)
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			key := readKey(t, stdout)
			base := "http://" + addr
			get := func(path string) (*http.Response, error) {
				req, _ := http.NewRequest(http.MethodGet, base+path, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				return http.DefaultClient.Do(req)
			}
			if resp, err := get("/readyz"); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("readyz: %v %v", resp, err)
			}

			req, _ := http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(`{"kind":"echo","input":{"n":7}}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("submit: %v %v", resp, err)
			}
			var j struct{ ID, State string }
			json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
			resp, err = get("/v1/jobs/" + j.ID + "?wait=30s")
			if err != nil {
				t.Fatal(err)
			}
			var done struct {
				State  string
				Result json.RawMessage
			}
			json.NewDecoder(resp.Body).Decode(&done)
			resp.Body.Close()
			if done.State != "succeeded" || string(done.Result) != `{"n":7}` {
				t.Fatalf("job ended %s with %s", done.State, done.Result)
			}

			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("dev mode exited with %v after SIGINT", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("dev mode still running 30s after SIGINT")
			}
		})
	}
}

// readKey reads the banner up to the API key.
func readKey(t *testing.T, stdout io.Reader) string {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case l := <-lines:
			if _, rest, ok := strings.Cut(l, "key "); ok && strings.HasPrefix(strings.TrimSpace(l), "API") {
				return strings.TrimSuffix(rest, ")")
			}
		case <-ctx.Done():
			t.Fatal("dev mode printed no API key within 60s")
		}
	}
}
