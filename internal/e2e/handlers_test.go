package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

// handlerProcess is an example remote handler (examples/*-handler) running
// as a subprocess, with its stdout lines ("started <job> <token>",
// "disconnected <job> <token>", ...) readable by the test.
type handlerProcess struct {
	url   string
	lines chan string
}

// repoPath is the path of elem in the repository.
func repoPath(elem ...string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(file), "..", ".."}, elem...)...)
}

// startHandler runs an example handler, command then its arguments with
// "{port}" replaced by a free port, until the test ends.
func startHandler(t *testing.T, command ...string) *handlerProcess {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for i := range command {
		command[i] = strings.ReplaceAll(command[i], "{port}", strconv.Itoa(port))
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Dir = repoPath("examples")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v (.ci/run installs python3 and nodejs)", command[0], err)
	}
	h := &handlerProcess{url: "http://127.0.0.1:" + strconv.Itoa(port) + "/", lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h.line(t, "listening")
	return h
}

// line waits for the next line starting with prefix and returns its words.
func (h *handlerProcess) line(t *testing.T, prefix string) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("the handler exited before printing %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return strings.Fields(l)
			}
		case <-timeout:
			t.Fatalf("the handler never printed %q", prefix)
		}
	}
}

// TestExampleHandlers runs the Python and Node example handlers behind the
// real API and worker: each language's client submits a job, follows its
// event stream and cancels it mid-stream, and the handler sees its request
// closed; then a worker killed -9 mid-job leaves its job to another one,
// whose request carries a higher fencing token.
func TestExampleHandlers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		command, client []string
		// sdk calls its function with the example's SDK ready to load.
		sdk func(testing.TB, func(string))
	}{
		{"python", []string{"python3", "python-handler/handler.py", "--port", "{port}"}, []string{"python3", "python-handler/client.py"},
			func(_ testing.TB, f func(string)) { f(repoPath("sdk", "python")) }},
		{"node", []string{"node", "node-handler/handler.js", "{port}"}, []string{"node", "node-handler/client.js"},
			testenv.WithTypeScriptSDK},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				h     *handlerProcess
				s     *system
				first *exec.Cmd
				out   []byte
				err   error
			)
			c.sdk(t, func(string) {
				h = startHandler(t, c.command...)
				s = newSystem(t, "LEASEHOLD_HANDLERS=demo.write="+h.url)
				first = s.start("worker")

				// Submit, stream, cancel mid-stream: the client does it all.
				client := exec.Command(c.client[0], append(c.client[1:], "--api", s.base, "--key", s.key, "--steps", "200", "--cancel-after", "2")...)
				client.Dir = repoPath("examples")
				out, err = client.CombinedOutput()
			})
			if err != nil || !strings.Contains(string(out), "output line 2") || !strings.HasSuffix(strings.TrimSpace(string(out)), "state cancelled") {
				t.Fatalf("client: %v\n%s", err, out)
			}
			id := strings.Fields(string(out))[1]
			if started, gone := h.line(t, "started"), h.line(t, "disconnected"); started[1] != id || gone[1] != id {
				t.Fatalf("handler saw %v then %v, want job %s started then disconnected", started, gone, id)
			}

			// Kill -9 the worker mid-job.
			code, j := s.do(http.MethodPost, "/v1/jobs", `{"kind":"demo.write","input":{"steps":30,"delay":0.05},"max_attempts":3}`)
			if code != http.StatusCreated {
				t.Fatalf("submit: %d", code)
			}
			started := h.line(t, "started")
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			s.start("worker")
			again := h.line(t, "started")
			done := s.waitState(j.ID, 60*time.Second, "succeeded", "failed", "cancelled")
			if done.State != "succeeded" || done.Attempt != 2 {
				t.Fatalf("ended %s on attempt %d, want succeeded on attempt 2", done.State, done.Attempt)
			}
			if a, b := atoi(t, started[2]), atoi(t, again[2]); b <= a || uint64(b) != done.Execution.FencingToken {
				t.Fatalf("tokens %d then %d (job's last %d): the retry must carry a higher one", a, b, done.Execution.FencingToken)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPythonHandlerPushback runs the Python example's demo.chat against an
// upstream that answers one call at a time and refuses more with 429 and
// Retry-After: the handler passes each 429 on as pushback, so every job
// succeeds on its first attempt, with its usage reported, and the adaptive
// key's history counts the 429s.
func TestPythonHandlerPushback(t *testing.T) {
	t.Parallel()
	llm := fakellm.New(fakellm.Config{Delay: 50 * time.Millisecond, Limits: fakellm.Limits{Concurrency: 1, RetryAfter: time.Second}})
	upstream := httptest.NewServer(llm)
	t.Cleanup(upstream.Close)
	t.Cleanup(llm.Close)
	h := startHandler(t, "python3", "python-handler/handler.py", "--port", "{port}", "--upstream", upstream.URL)
	// An adaptive key starts at an eighth of its limit: 2 at once, one
	// more than the upstream takes.
	s := newSystem(t, "LEASEHOLD_HANDLERS=demo.chat="+h.url, "LEASEHOLD_LIMITS=model:fake=16;adaptive")
	s.start("worker")
	var ids []string
	for range 4 {
		code, j := s.do(http.MethodPost, "/v1/jobs", `{"kind":"demo.chat","concurrency_keys":["model:fake"],"max_attempts":1,
			"input":{"messages":[{"role":"user","content":"hi"}],"max_tokens":20}}`)
		if code != http.StatusCreated {
			t.Fatalf("submit: %d", code)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		if j := s.waitState(id, 90*time.Second, "succeeded", "failed", "cancelled"); j.State != "succeeded" || j.Attempt != 1 {
			t.Fatalf("job %s ended %s on attempt %d, want succeeded on its only attempt (error %+v)", id, j.State, j.Attempt, j.Error)
		}
	}
	if words := h.line(t, "pushback"); words[2] != "1" {
		t.Errorf("handler passed on %v, want the upstream's Retry-After 1", words)
	}
	if st := llm.Stats(); st.Refused == 0 || st.PeakServing > 1 {
		t.Errorf("upstream %+v: want refusals, never two served at once", st)
	}
	req, _ := http.NewRequest(http.MethodGet, s.base+"/v1/limits/model:fake/history", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var hist struct {
		Minutes []struct{ Pushbacks int } `json:"minutes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&hist); err != nil {
		t.Fatal(err)
	}
	pushbacks := 0
	for _, m := range hist.Minutes {
		pushbacks += m.Pushbacks
	}
	if pushbacks == 0 {
		t.Errorf("model:fake's history %+v counts no 429", hist)
	}
}
