package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestDevModeSmoke builds the dev binary, starts it as `make run` does,
// runs an echo job and a remote handler's job through the API and stops it as Ctrl-C does, with
// SIGINT to its whole process group — with a redis-server child and with
// the in-process stand-in. The stop is quiet and clean: exit 0, no WARN or
// ERROR line after the signal, and the redis-server child, which Ctrl-C
// must not reach, stopped last with a clean shutdown.
func TestDevModeSmoke(t *testing.T) {
	if !redisproc.Installed() {
		t.Fatal(redisproc.InstallHint)
	}
	// No connection outlives its request: TestMain checks for leaked goroutines.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	bin := filepath.Join(t.TempDir(), "leasehold")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// A remote handler (LEASEHOLD_HANDLERS): the kind "shout" answers its
	// input's text in capitals.
	shout := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Text string }
		json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"text": strings.ToUpper(in.Text)})
	}))
	t.Cleanup(shout.Close)
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
			data := args[6]
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "LEASEHOLD_HANDLERS=shout="+shout.URL)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
			var stderr testenv.Buffer
			cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
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

			key, console := readBanner(t, stdout)
			base := "http://" + addr
			if console != base+"/ui/" {
				t.Fatalf("the banner shows the console at %q, want %s/ui/", console, base)
			}
			get := func(path string) (*http.Response, error) {
				req, _ := http.NewRequest(http.MethodGet, base+path, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				return client.Do(req)
			}
			resp, err := get("/readyz")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("readyz: %v %v", resp, err)
			}
			resp.Body.Close()
			resp, err = get("/ui/")
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
				t.Fatalf("console: %v %v", resp, err)
			}
			resp.Body.Close()

			var j struct{ ID, State string }
			for body, want := range map[string]string{
				`{"kind":"echo","input":{"n":7}}`:           `{"n":7}`,
				`{"kind":"shout","input":{"text":"hello"}}`: `{"text":"HELLO"}`,
			} {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err = client.Do(req)
				if err != nil || resp.StatusCode != http.StatusCreated {
					t.Fatalf("submit %s: %v %v", body, resp, err)
				}
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
				if done.State != "succeeded" || strings.TrimSpace(string(done.Result)) != want {
					t.Fatalf("job %s ended %s with %s, want %s", body, done.State, done.Result, want)
				}
			}

			// The chat endpoint answers from the same fake upstream as
			// llm.chat jobs.
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
				strings.NewReader(`{"model":"fake","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if resp, err = client.Do(req); err != nil {
				t.Fatal(err)
			}
			var chat struct {
				Choices []struct{ Message struct{ Content string } }
			}
			json.NewDecoder(resp.Body).Decode(&chat)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" {
				t.Fatalf("chat completion: %s %+v", resp.Status, chat)
			}

			// A job runs when Ctrl-C comes: the worker finishes it during
			// its shutdown, which needs Redis until the end.
			req, _ = http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(`{"kind":"sleep","input":{"duration":"2s","tick":"1s"}}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("submit: %v %v", resp, err)
			}
			json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
			testenv.Eventually(t, 30*time.Second, func() bool {
				if resp, err = get("/v1/jobs/" + j.ID); err != nil {
					t.Fatal(err)
				}
				json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				return j.State == "running"
			}, "sleep job %s never ran", j.ID)
			before := len(stderr.Lines())
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil { // Ctrl-C
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("dev mode exited with %v after SIGINT", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("dev mode still running 30s after SIGINT")
			}
			for _, l := range stderr.Lines()[before:] {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					t.Errorf("stop not quiet: %s", l)
				}
			}
			if mode != "redis-server" {
				return
			}
			log, err := os.ReadFile(filepath.Join(data, "redis", "redis.log"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(log), "Received SIGTERM") || strings.Contains(string(log), "Received SIGINT") ||
				!strings.Contains(string(log), "ready to exit, bye bye") {
				t.Errorf("redis-server was not stopped last, cleanly, by its parent's SIGTERM:\n%s", log)
			}
		})
	}
}

// readBanner reads the banner up to the console's address, after the API
// key.
func readBanner(t *testing.T, stdout io.Reader) (key, console string) {
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
			f := strings.Fields(l)
			switch {
			case len(f) > 1 && f[0] == "API":
				if _, rest, ok := strings.Cut(l, "key "); ok {
					key = strings.TrimSuffix(rest, ")")
				}
			case len(f) > 1 && f[0] == "Console":
				return key, f[1]
			}
		case <-ctx.Done():
			t.Fatal("dev mode printed no API key and console within 60s")
		}
	}
}
