// Package e2e drives the real binaries: cmd/api and cmd/worker are built,
// started as processes against a real Redis and NATS, and exercised over
// HTTP the way a client would, with a worker killed -9 mid-job.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
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
	"github.com/leasehold/leasehold/internal/testenv"
)

// binaries are the paths of the built commands, by name.
var binaries = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := build(dir, "api", "worker"); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = testenv.Run(m, nil)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func build(dir string, names ...string) error {
	for _, name := range names {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, "github.com/leasehold/leasehold/cmd/"+name)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", name, err, b)
		}
		binaries[name] = out
	}
	return nil
}

// system is one API process and any number of worker processes on the
// shared test Redis and NATS, under a prefix of the test's own.
type system struct {
	t      *testing.T
	env    []string
	base   string
	key    string
	prefix string
	api    *exec.Cmd // the API process newSystem started
}

func newSystem(t *testing.T, env ...string) *system {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &system{t: t, base: "http://127.0.0.1:" + strconv.Itoa(port), key: "e2e-key-0123456789abcdef", prefix: testenv.Prefix(t)}
	s.env = append(os.Environ(),
		"LEASEHOLD_REDIS_URL=redis://"+testenv.Redis(t).Addr()+"/0",
		"LEASEHOLD_NATS_URL="+testenv.NATS(t).URL(),
		"LEASEHOLD_PREFIX="+s.prefix,
		"LEASEHOLD_API_KEYS=acme:"+s.key,
		"LEASEHOLD_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"LEASEHOLD_HEARTBEAT=100ms",
		"LEASEHOLD_LEASE_TTL=1s",
		"LEASEHOLD_SHUTDOWN_GRACE=1s",
		"LEASEHOLD_METRICS_ADDR=127.0.0.1:0", // several workers: a free port each
	)
	s.env = append(s.env, env...)
	s.api = s.start("api")
	testenv.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, "api never became ready")
	return s
}

// start runs a binary until the test ends; its log lines go to the test log.
func (s *system) start(name string) *exec.Cmd {
	s.t.Helper()
	cmd := exec.Command(binaries[name])
	cmd.Env = s.env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_ = sc.Text() // drained; kept out of the test log to keep it readable
		}
	}()
	s.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	return cmd
}

type jobView struct {
	ID              string `json:"id"`
	State           string `json:"state"`
	Attempt         int    `json:"attempt"`
	CancelRequested bool   `json:"cancel_requested"`
	Execution       *struct {
		FencingToken uint64 `json:"fencing_token"`
		Worker       string `json:"worker"`
	} `json:"execution"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
	Webhook *struct {
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
	} `json:"webhook"`
}

func (s *system) do(method, path, body string) (int, jobView) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var j jobView
	_ = json.Unmarshal(b, &j)
	return resp.StatusCode, j
}

func (s *system) waitState(id string, timeout time.Duration, states ...string) jobView {
	s.t.Helper()
	var j jobView
	testenv.Eventually(s.t, timeout, func() bool {
		_, j = s.do(http.MethodGet, "/v1/jobs/"+id, "")
		for _, st := range states {
			if j.State == st {
				return true
			}
		}
		return false
	}, "job %s never reached %v", id, states)
	return j
}

func TestSubmitRunCancel(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.start("worker")
	code, j := s.do(http.MethodPost, "/v1/jobs", `{"kind":"sleep","input":{"duration":"1m","tick":"100ms"}}`)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	s.waitState(j.ID, 30*time.Second, "running")
	if code, c := s.do(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", ""); code != http.StatusAccepted || !c.CancelRequested {
		t.Fatalf("cancel: %d %+v", code, c)
	}
	done := s.waitState(j.ID, 30*time.Second, "cancelled", "succeeded", "failed")
	if done.State != "cancelled" || done.Attempt != 1 {
		t.Fatalf("ended %s on attempt %d, want cancelled on attempt 1", done.State, done.Attempt)
	}
}

func TestWorkerKilledMidJobIsRetriedElsewhere(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	first := s.start("worker")
	code, j := s.do(http.MethodPost, "/v1/jobs", `{"kind":"sleep","input":{"duration":"3s","tick":"100ms"},"max_attempts":3}`)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	running := s.waitState(j.ID, 30*time.Second, "running")
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.start("worker")
	done := s.waitState(j.ID, 60*time.Second, "succeeded", "failed", "cancelled")
	if done.State != "succeeded" || done.Attempt != 2 {
		t.Fatalf("ended %s on attempt %d, want succeeded on attempt 2", done.State, done.Attempt)
	}
	if done.Execution.FencingToken <= running.Execution.FencingToken {
		t.Fatalf("token %d after %d: a new execution must carry a higher token",
			done.Execution.FencingToken, running.Execution.FencingToken)
	}
}
