package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

const (
	acmeKey  = "acme-cli-key-0123456789"
	adminKey = "admin-cli-key-0123456789"
)

// system is the real binaries, built by the test: an API and a worker on
// the test Redis and NATS, and the CLI, pointed at the API.
type system struct {
	t      *testing.T
	bin    string   // the directory of the built binaries
	url    string   // the API's
	common []string // the flags every process of the system takes
}

func startSystem(t *testing.T) *system {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "../api", "../worker", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	prefix := testenv.Prefix(t)
	llm := httptest.NewServer(fakellm.New(fakellm.Config{Tokens: 8, Delay: 20 * time.Millisecond}))
	t.Cleanup(llm.Close)
	apiAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	common := []string{"--redis-url", "redis://" + testenv.Redis(t).Addr() + "/0", "--nats-url", testenv.NATS(t).URL(), "--prefix", prefix}
	opsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	start(t, filepath.Join(bin, "api"), append(common, "--addr", apiAddr, "--api-keys", "acme:"+acmeKey+",admin:"+adminKey,
		"--queues", "default,slow", "--metrics-addr", opsAddr, "--limits", "model:none=0")...)
	start(t, filepath.Join(bin, "worker"), append(common, "--queues", "default,slow", "--heartbeat", "100ms", "--lease-ttl", "1s",
		"--shutdown-grace", "1s", "--metrics-addr", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--llm-base-url", llm.URL+"/v1")...)
	s := &system{t: t, bin: bin, url: "http://" + apiAddr, common: common}
	t.Cleanup(http.DefaultClient.CloseIdleConnections) // TestMain checks for leaked goroutines
	waitReady(t, opsAddr)
	return s
}

// waitReady waits until the API whose ops port is at addr is ready.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, "the API at %s never became ready", addr)
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// start runs a binary until the test ends.
func start(t *testing.T, path string, args ...string) {
	t.Helper()
	cmd := exec.Command(path, args...)
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", filepath.Base(path), out.String())
		}
	})
}

// cliRun is one run of the CLI.
type cliRun struct {
	stdout, stderr string
	code           int
}

// cli runs the CLI with args as acme (LEASEHOLD_URL and LEASEHOLD_KEY),
// stdin as its input.
func (s *system) cli(stdin string, args ...string) cliRun {
	s.t.Helper()
	cmd := s.command(args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		r.code = exit.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return r
}

func (s *system) command(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, "leasehold"), args...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_URL="+s.url, "LEASEHOLD_KEY="+acmeKey)
	return cmd
}

// ok runs the CLI and fails the test unless it exits 0.
func (s *system) ok(args ...string) cliRun {
	s.t.Helper()
	r := s.cli("", args...)
	if r.code != 0 {
		s.t.Fatalf("leasehold %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// submit submits a job with the CLI and returns its id.
func (s *system) submit(args ...string) string {
	s.t.Helper()
	var j struct{ ID, State string }
	r := s.ok(append([]string{"submit", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.ID == "" || j.State != "queued" {
		s.t.Fatalf("submit %v: %v %q", args, err, r.stdout)
	}
	return j.ID
}

// state reads a job's state with `get -o json`.
func (s *system) state(id string) string {
	s.t.Helper()
	var j struct{ State string }
	if err := json.Unmarshal([]byte(s.ok("get", id, "-o", "json").stdout), &j); err != nil {
		s.t.Fatal(err)
	}
	return j.State
}

func TestCLI(t *testing.T) {
	t.Parallel()
	s := startSystem(t)

	t.Run("submit input from a flag, a file and stdin; get", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "in.json")
		if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		for src, args := range map[string][]string{
			"flag":  {"echo", "--input", `{"from":"flag"}`},
			"file":  {"echo", "--input-file", file},
			"stdin": {"--input-file", "-", "echo"},
		} {
			r := s.cli(`{"from":"stdin"}`, append([]string{"submit", "-o", "json"}, args...)...)
			var j struct{ ID string }
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &j) != nil {
				t.Fatalf("submit from %s: exit %d %s %s", src, r.code, r.stdout, r.stderr)
			}
			testenv.Eventually(t, 20*time.Second, func() bool { return s.state(j.ID) == "succeeded" }, "echo job never succeeded")
			got := s.ok("get", j.ID)
			if !strings.Contains(got.stdout, `{"from":"`+src+`"}`) || !strings.Contains(got.stdout, "succeeded") {
				t.Errorf("get (table) of the job from %s:\n%s", src, got.stdout)
			}
		}
		if r := s.cli("", "submit", "echo", "--input", "{not json"); r.code != 2 {
			t.Errorf("bad input: exit %d, want 2", r.code)
		}
		// The API of these tests has no LEASEHOLD_WEBHOOK_ALLOW: the
		// webhook reaches it, and it refuses it by name.
		if r := s.cli("", "submit", "echo", "--webhook", "https://hooks.example.com/x"); r.code != 1 || !strings.Contains(r.stderr, "webhook.url") {
			t.Errorf("a webhook the API refuses: exit %d %s", r.code, r.stderr)
		}
		if r := s.cli("", "get"); r.code != 2 {
			t.Errorf("get without an id: exit %d, want 2", r.code)
		}
		if r := s.cli("", "get", "01234567-89ab-7def-8123-456789abcdef"); r.code != 1 || !strings.Contains(r.stderr, "404") {
			t.Errorf("get of an unknown job: exit %d %s", r.code, r.stderr)
		}
		if r := s.cli("", "get", "x", "--key", "wrong"); r.code != 1 || !strings.Contains(r.stderr, "401") {
			t.Errorf("a wrong key: exit %d %s", r.code, r.stderr)
		}
	})

	t.Run("submit --batch from a file and stdin", func(t *testing.T) {
		var lines []string
		for i := range 1001 { // two requests
			lines = append(lines, fmt.Sprintf(`{"kind":"echo","input":{"n":%d},"idempotency_key":"line-%d"}`, i, i))
		}
		lines = append(lines[:3], append([]string{"", `{"kind":"Echo"}`}, lines[3:]...)...) // a blank line, a refused one
		file := filepath.Join(t.TempDir(), "jobs.jsonl")
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := s.cli("", "submit", "--batch", file)
		if r.code != 1 || !strings.Contains(r.stderr, "1 of 1002 jobs refused") {
			t.Fatalf("a batch with a refused line: exit %d %s", r.code, r.stderr)
		}
		rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(rows) != 1003 || !strings.HasPrefix(rows[4], "5 ") || !strings.Contains(rows[4], "400") || !strings.Contains(rows[4], "kind") {
			t.Fatalf("%d rows; the refused line's: %q", len(rows), rows[min(4, len(rows)-1)])
		}
		last := strings.Fields(rows[len(rows)-1]) // line 1003, the 1001st job, of the second request
		if last[0] != "1003" || last[1] != "201" {
			t.Fatalf("last row %q", rows[len(rows)-1])
		}
		testenv.Eventually(t, 30*time.Second, func() bool { return s.state(last[2]) == "succeeded" }, "the batch's last job never succeeded")

		// From stdin, the lines again: replays of the same jobs.
		r = s.cli(lines[0]+"\n"+lines[1000], "submit", "--batch", "-", "-o", "json")
		var answer struct{ Jobs []struct{ Status int } }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &answer) != nil || len(answer.Jobs) != 2 || answer.Jobs[0].Status != 200 {
			t.Fatalf("replayed from stdin: exit %d %s %s", r.code, r.stdout, r.stderr)
		}
		for _, bad := range [][]string{{"submit", "--batch", file, "echo"}, {"submit", "--batch", file, "--queue", "slow"}} {
			if r := s.cli("", bad...); r.code != 2 {
				t.Errorf("%v: exit %d, want 2", bad, r.code)
			}
		}
		if r := s.cli("{not json\n", "submit", "--batch", "-"); r.code != 2 || !strings.Contains(r.stderr, "line 1") {
			t.Errorf("a line that is not JSON: exit %d %s", r.code, r.stderr)
		}
	})

	t.Run("a tenant's control characters never reach the terminal", func(t *testing.T) {
		text := `"\u001b]0;pwned\u0007\u001b[2J\u009b31m\r"`
		id := s.submit("echo", "--input", `{"s":`+text+`}`, "--metadata", `{"m":`+text+`}`)
		testenv.Eventually(t, 20*time.Second, func() bool { return s.state(id) == "succeeded" }, "echo job never succeeded")
		for _, args := range [][]string{{"get", id}, {"get", id, "-o", "json"}, {"ls"}} {
			r := s.ok(args...)
			if c := controls(r.stdout + r.stderr); c != "" {
				t.Errorf("leasehold %s wrote %q:\n%s", strings.Join(args, " "), c, r.stdout)
			}
		}
		var j struct{ Result, Metadata struct{ S, M string } }
		if err := json.Unmarshal([]byte(s.ok("get", id, "-o", "json").stdout), &j); err != nil {
			t.Fatal(err)
		}
		if want := "\x1b]0;pwned\a\x1b[2J\u009b31m\r"; j.Result.S != want || j.Metadata.M != want {
			t.Errorf("-o json reads %q and %q, want %q both times", j.Result.S, j.Metadata.M, want)
		}
	})

	t.Run("watch streams output text and exits 0", func(t *testing.T) {
		id := s.submit("llm.chat", "--input", `{"model":"fake","messages":[{"role":"user","content":"hi"}]}`)
		r := s.cli("", "watch", id)
		var j struct{ Result struct{ Text string } }
		if err := json.Unmarshal([]byte(s.ok("get", id, "-o", "json").stdout), &j); err != nil {
			t.Fatal(err)
		}
		if r.code != 0 || r.stdout != j.Result.Text || j.Result.Text == "" {
			t.Errorf("watch: exit %d, stdout %q, want the result's text %q\n%s", r.code, r.stdout, j.Result.Text, r.stderr)
		}
		if !strings.Contains(r.stderr, "state running") || !strings.Contains(r.stderr, "job "+id+" succeeded") {
			t.Errorf("watch's states:\n%s", r.stderr)
		}
	})

	t.Run("watch shows each event's time, and ends streamed text's line", func(t *testing.T) {
		id := s.submit("llm.chat", "--input", `{"model":"fake","messages":[{"role":"user","content":"hi"}]}`)
		var j struct {
			Result     struct{ Text string }
			FinishedAt time.Time `json:"finished_at"`
		}
		testenv.Eventually(t, 20*time.Second, func() bool {
			err := json.Unmarshal([]byte(s.ok("get", id, "-o", "json").stdout), &j)
			return err == nil && !j.FinishedAt.IsZero()
		}, "the job never ended")
		// Replayed well after the end, the last state still shows the
		// time of the end, not the time it is printed.
		testenv.Eventually(t, 10*time.Second, func() bool { return time.Since(j.FinishedAt) > 2*time.Second }, "the clock stood still")
		cmd := s.command("watch", id)
		var both bytes.Buffer
		cmd.Stdout, cmd.Stderr = &both, &both // one pipe, as a terminal shows both
		if err := cmd.Run(); err != nil {
			t.Fatalf("watch: %v\n%s", err, both.String())
		}
		out := both.String()
		if !strings.Contains(out, j.Result.Text+"\n") || !strings.Contains(out, "\njob "+id+" succeeded\n") {
			t.Errorf("the text's line is not ended before what follows it:\n%q", out)
		}
		var end string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "state succeeded") {
				end = strings.Fields(l)[0]
			}
		}
		finished := j.FinishedAt.Local() // the event's id and finished_at may fall on two sides of a second
		if end != finished.Format(time.TimeOnly) && end != finished.Add(-time.Second).Format(time.TimeOnly) && end != finished.Add(time.Second).Format(time.TimeOnly) {
			t.Errorf("the end is shown at %q, the job finished at %s:\n%s", end, finished.Format(time.TimeOnly), out)
		}
	})

	t.Run("an unknown command, an API not running", func(t *testing.T) {
		if r := s.cli("", "sumbit", "echo"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "sumbit"; did you mean "submit"?`) {
			t.Errorf("a mistyped command: exit %d %s", r.code, r.stderr)
		}
		if r := s.cli("", "sched"); r.code != 2 || !strings.Contains(r.stderr, `did you mean "schedules"?`) {
			t.Errorf("a command's start: exit %d %s", r.code, r.stderr)
		}
		if r := s.cli("", "frobnicate"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "frobnicate" (`) {
			t.Errorf("a command like none: exit %d %s", r.code, r.stderr)
		}
		down := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
		for _, args := range [][]string{{"ls"}, {"submit", "echo"}, {"get", "x"}} {
			if r := s.cli("", append(args, "--url", down)...); r.code != 1 || !strings.Contains(r.stderr, "cannot reach the API at "+down+": is it running?") {
				t.Errorf("%v with no API: exit %d %s", args, r.code, r.stderr)
			}
		}
	})

	t.Run("watch resumes across a dropped connection", func(t *testing.T) {
		proxy := newProxy(t, strings.TrimPrefix(s.url, "http://"))
		id := s.submit("sleep", "--input", `{"duration":"2s","tick":"100ms"}`)
		cmd := s.command("watch", id, "-o", "json", "--url", "http://"+proxy.addr())
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr testenv.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var events []struct{ ID, Event string }
		cut := 0
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e struct{ ID, Event string }
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("watch -o json line %q: %v", sc.Text(), err)
			}
			events = append(events, e)
			if e.Event == "progress" && cut < 2 && len(events)%4 == 0 {
				proxy.cut() // twice, mid-stream
				cut++
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("watch: %v\n%s", err, stderr.String())
		}
		seen := map[string]bool{}
		progress := 0
		for _, e := range events {
			if seen[e.ID] {
				t.Errorf("event %s shown twice", e.ID)
			}
			seen[e.ID] = true
			if e.Event == "progress" {
				progress++
			}
		}
		if cut != 2 || proxy.connections() < 3 || progress < 15 {
			t.Errorf("%d cuts, %d connections, %d progress events of 19", cut, proxy.connections(), progress)
		}
		if last := events[len(events)-1]; last.Event != "state" {
			t.Errorf("the last event is %+v", last)
		}
		// For people: a bar from done/total.
		r := s.ok("watch", id)
		if !strings.Contains(r.stderr, "[#") || !strings.Contains(r.stderr, "% 10/20") {
			t.Errorf("no progress bar:\n%s", r.stderr)
		}
	})

	t.Run("signal", func(t *testing.T) {
		id := s.submit("sleep", "--input", `{"duration":"100ms","tick":"100ms","wait_for":"approval"}`)
		testenv.Eventually(t, 20*time.Second, func() bool { return s.state(id) == "waiting" }, "the job never waited")
		if r := s.ok("get", id); !strings.Contains(r.stdout, `signal "approval" until`) {
			t.Errorf("get of a waiting job:\n%s", r.stdout)
		}
		if r := s.cli("", "signal", id, "Bad Name"); r.code != 1 || !strings.Contains(r.stderr, "400") {
			t.Errorf("signal with a bad name: exit %d %s", r.code, r.stderr)
		}
		if r := s.ok("signal", id, "approval", "--data", `{"ok":1}`); !strings.Contains(r.stdout, "queued") && !strings.Contains(r.stdout, "running") {
			t.Errorf("signal:\n%s", r.stdout)
		}
		if r := s.cli("", "watch", id); r.code != 0 {
			t.Errorf("watch of the signalled job: exit %d, want 0\n%s", r.code, r.stderr)
		}
		if r := s.ok("get", id); !strings.Contains(r.stdout, `{"signal":{"ok":1},"timed_out":false}`) {
			t.Errorf("the signalled job's result:\n%s", r.stdout)
		}
	})

	t.Run("exit codes, cancel, retry and bulk retry", func(t *testing.T) {
		failed := s.submit("sleep", "--input", `{"duration":"100ms","tick":"100ms","fail_attempts":1}`, "--max-attempts", "1")
		if r := s.cli("", "watch", failed); r.code != 3 {
			t.Errorf("watch of a failing job: exit %d, want 3\n%s", r.code, r.stderr)
		}

		id := s.submit("sleep", "--input", `{"duration":"1s","tick":"100ms"}`)
		testenv.Eventually(t, 20*time.Second, func() bool { return s.state(id) == "running" }, "the job never ran")
		if r := s.ok("cancel", id); !strings.Contains(r.stdout, "cancel requested") {
			t.Errorf("cancel:\n%s", r.stdout)
		}
		if r := s.cli("", "watch", id); r.code != 4 {
			t.Errorf("watch of a cancelled job: exit %d, want 4\n%s", r.code, r.stderr)
		}
		if r := s.ok("retry", id); !strings.Contains(r.stdout, "queued") && !strings.Contains(r.stdout, "running") {
			t.Errorf("retry:\n%s", r.stdout)
		}
		if r := s.cli("", "watch", id); r.code != 0 {
			t.Errorf("watch of the retried job: exit %d, want 0\n%s", r.code, r.stderr)
		}
		if r := s.cli("", "retry", id); r.code != 1 || !strings.Contains(r.stderr, "409") {
			t.Errorf("retry of a succeeded job: exit %d %s", r.code, r.stderr)
		}

		// A limit of 0 on its model key (set at the API's start, long read
		// by the worker) holds the job until max_wait ends it. (A pause
		// would not: a worker sees it only at its next heartbeat.)
		expired := s.submit("llm.chat", "--input", `{"model":"none","messages":[{"role":"user","content":"hi"}]}`, "--max-wait", "200ms")
		if r := s.cli("", "watch", expired); r.code != 5 {
			t.Errorf("watch of an expiring job: exit %d, want 5\n%s", r.code, r.stderr)
		}

		// The failed job is one of acme's failed: a bulk retry moves it,
		// and a second moves nothing. Its next run is its second attempt,
		// which its fail_attempts lets succeed: "2/2" in the listing.
		s.ok("queues", "pause", "default", "--key", adminKey)
		r := s.ok("retry", "--all", "--state", "failed")
		if !strings.Contains(r.stdout, "moved 1 ") {
			t.Errorf("bulk retry: %s", r.stdout)
		}
		if r := s.ok("retry", "--all", "--state", "failed", "-o", "json"); !strings.Contains(r.stdout, `"moved":0`) {
			t.Errorf("second bulk retry: %s", r.stdout)
		}
		s.ok("queues", "resume", "default", "--key", adminKey)
		if r := s.cli("", "watch", failed); r.code != 0 {
			t.Errorf("watch of the retried failed job: exit %d, want 0\n%s", r.code, r.stderr)
		}
		if r := s.ok("get", failed); !strings.Contains(r.stdout, "2 of 2") {
			t.Errorf("the retried job, want attempt 2 of 2:\n%s", r.stdout)
		}
		if r := s.ok("ls", "--state", "succeeded"); !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool {
			return strings.HasPrefix(l, failed) && slices.Contains(strings.Fields(l), "2/2")
		}) {
			t.Errorf("the retried job in the listing, want 2/2:\n%s", r.stdout)
		}
	})

	t.Run("bulk retry goes on over its cursor", func(t *testing.T) {
		// More cancelled jobs than one call of the API moves (1000): the
		// CLI calls again with each next_cursor until none is left. The
		// jobs are held by the model key's limit of 0, so each is still
		// queued when it is cancelled. (A pause would not hold them: a
		// worker sees it only at its next heartbeat.)
		post := func(path, body string) []byte {
			req, _ := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+acmeKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode/100 != 2 {
				t.Fatalf("POST %s: %s %s", path, resp.Status, b)
			}
			return b
		}
		const n = 1001
		for range n {
			var j struct{ ID string }
			if err := json.Unmarshal(post("/v1/jobs", `{"kind": "llm.chat", "queue": "slow", "input": {"model": "none", "messages": [{"role": "user", "content": "hi"}]}}`), &j); err != nil {
				t.Fatal(err)
			}
			post("/v1/jobs/"+j.ID+"/cancel", "")
		}
		if r := s.ok("retry", "--all", "--state", "cancelled", "--queue", "slow", "-o", "json"); !strings.Contains(r.stdout, `"moved":1001`) {
			t.Errorf("bulk retry of %d jobs: %s", n, r.stdout)
		}
	})

	t.Run("bulk retry waits out the rate", func(t *testing.T) {
		// A second API spends a rate of 4 jobs a second (the first spends
		// none): one call moves 4 of 10 and asks to wait, and the CLI waits
		// and goes on until all 10 are moved.
		addr, ops := "127.0.0.1:"+strconv.Itoa(freePort(t)), "127.0.0.1:"+strconv.Itoa(freePort(t))
		start(t, filepath.Join(s.bin, "api"), append(s.common, "--addr", addr, "--api-keys", "acme:"+acmeKey+",admin:"+adminKey,
			"--queues", "default,slow", "--metrics-addr", ops, "--rate", "4/s:4")...)
		waitReady(t, ops)
		for range 10 {
			id := s.submit("llm.chat", "--queue", "slow", "--metadata", `{"batch":"rated"}`, "--input", `{"model":"none","messages":[{"role":"user","content":"hi"}]}`)
			s.ok("cancel", id)
		}
		cmd := s.command("retry", "--all", "--state", "cancelled", "--queue", "slow", "-o", "json")
		cmd.Env = append(cmd.Env, "LEASEHOLD_URL=http://"+addr)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), `"moved":10`) || !strings.Contains(stderr.String(), "asks to wait") {
			t.Errorf("bulk retry under a rate of 4/s: %v\n%s%s", err, stdout.String(), stderr.String())
		}
	})

	t.Run("ls, rm, queues, limits, usage", func(t *testing.T) {
		id := s.submit("echo")
		testenv.Eventually(t, 20*time.Second, func() bool { return s.state(id) == "succeeded" }, "echo job never succeeded")
		if r := s.ok("ls", "--state", "succeeded", "--limit", "500"); !strings.HasPrefix(r.stdout, "ID ") || !strings.Contains(r.stdout, id) {
			t.Errorf("ls:\n%s", r.stdout)
		}
		var page struct{ Jobs []struct{ ID string } }
		if err := json.Unmarshal([]byte(s.ok("ls", "-o", "json").stdout), &page); err != nil || len(page.Jobs) == 0 {
			t.Errorf("ls -o json: %v %+v", err, page)
		}
		if r := s.ok("rm", id); !strings.Contains(r.stdout, "deleted "+id) {
			t.Errorf("rm: %s", r.stdout)
		}
		if r := s.cli("", "get", id); r.code != 1 {
			t.Errorf("get after rm: exit %d", r.code)
		}

		if r := s.ok("queues"); !strings.HasPrefix(r.stdout, "QUEUE ") || !strings.Contains(r.stdout, "default") {
			t.Errorf("queues:\n%s", r.stdout)
		}
		if r := s.ok("queues", "pause", "slow", "--key", adminKey, "-o", "json"); !strings.Contains(r.stdout, `"paused":true`) {
			t.Errorf("queues pause -o json: %s", r.stdout)
		}
		if r := s.ok("queues", "resume", "slow", "--key", adminKey); !strings.Contains(r.stdout, "false") {
			t.Errorf("queues resume: %s", r.stdout)
		}
		if r := s.ok("queues"); strings.Join(strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0]), " ") != "QUEUE QUEUED RUNNING RETRYING WAITING PAUSED" {
			t.Errorf("queues columns:\n%s", r.stdout)
		}
		if r := s.ok("workers", "--key", adminKey); strings.Join(strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0]), " ") != "ID HOST QUEUES KINDS RUNNING STARTED HEARTBEAT" ||
			!strings.Contains(r.stdout, "default,slow") || !strings.Contains(r.stdout, "echo") {
			t.Errorf("workers:\n%s", r.stdout)
		}
		if r := s.ok("workers", "-o", "json"); !strings.HasPrefix(r.stdout, `{"workers":[`) {
			t.Errorf("workers -o json as a tenant running nothing: %s", r.stdout)
		}
		for _, admin := range [][]string{{"queues", "pause", "slow"}, {"limits", "set", "model:x", "1"}, {"limits", "rm", "model:x"}} {
			if r := s.cli("", admin...); r.code != 1 || !strings.Contains(r.stderr, "this command needs the admin key") {
				t.Errorf("%v as acme: exit %d %s", admin, r.code, r.stderr)
			}
		}

		if r := s.ok("limits", "set", "model:cli", "5", "--key", adminKey); !strings.Contains(r.stdout, "model:cli") {
			t.Errorf("limits set:\n%s", r.stdout)
		}
		if r := s.ok("limits", "-o", "json"); !strings.Contains(r.stdout, `"key":"model:cli","limit":5`) {
			t.Errorf("limits -o json: %s", r.stdout)
		}
		if r := s.ok("limits"); !strings.HasPrefix(r.stdout, "KEY ") || !strings.Contains(r.stdout, "model:cli") {
			t.Errorf("limits:\n%s", r.stdout)
		}
		// A budget, its flags after the key and limit: the listing shows
		// every column, a new adaptive key at its slow start (2 of 20).
		s.ok("limits", "set", "model:budget", "20", "--tpm", "400000", "--rpm", "3000", "--adaptive", "--per-tenant", "5", "--key", adminKey)
		r := s.ok("limits")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != "KEY LIMIT EFFECTIVE IN_USE RPM REQ/MIN TPM TOK/MIN THROTTLED_UNTIL WAITING" {
			t.Errorf("limits columns %q", got)
		}
		var row []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "model:budget" {
				row = f
			}
		}
		if strings.Join(row, " ") != "model:budget 20 2 0 3000 0 400000 0 - 0" {
			t.Errorf("model:budget listed as %q:\n%s", row, r.stdout)
		}
		if r := s.ok("limits", "-o", "json"); !strings.Contains(r.stdout, `"key":"model:budget","limit":20,"in_use":0,"effective_limit":2,"rpm":3000,"requests_last_minute":0,"tpm":400000,"tokens_last_minute":0,"adaptive":true,"per_tenant":5,"waiting":0,"throttled_until":null`) {
			t.Errorf("limits -o json: %s", r.stdout)
		}
		// set patches: a new limit keeps the budgets, a budget of 0 and
		// --adaptive=false remove theirs.
		s.ok("limits", "set", "model:budget", "30", "--key", adminKey)
		if r := s.ok("limits", "-o", "json"); !strings.Contains(r.stdout, `"key":"model:budget","limit":30,`) ||
			!strings.Contains(r.stdout, `"tpm":400000,"tokens_last_minute":0,"adaptive":true,"per_tenant":5,`) {
			t.Errorf("limits after set model:budget 30: %s", r.stdout)
		}
		s.ok("limits", "set", "model:budget", "--tpm", "0", "--adaptive=false", "--key", adminKey)
		if r := s.ok("limits", "-o", "json"); !strings.Contains(r.stdout, `"key":"model:budget","limit":30,"in_use":0,"effective_limit":null,"rpm":3000,"requests_last_minute":0,"tpm":null,"tokens_last_minute":null,"adaptive":false,"per_tenant":5,`) {
			t.Errorf("limits after --tpm 0 --adaptive=false: %s", r.stdout)
		}
		s.ok("limits", "rm", "model:budget", "--key", adminKey)
		s.ok("limits", "rm", "model:cli", "--key", adminKey)
		if r := s.cli("", "limits", "rm", "model:cli", "--key", adminKey); r.code != 1 {
			t.Errorf("second limits rm: exit %d", r.code)
		}

		if r := s.ok("usage"); !strings.HasPrefix(r.stdout, "DATE ") || !strings.Contains(r.stdout, "jobs_submitted") {
			t.Errorf("usage:\n%s", r.stdout)
		}
		var u struct{ Days []any }
		if err := json.Unmarshal([]byte(s.ok("usage", "-o", "json").stdout), &u); err != nil || len(u.Days) != 7 {
			t.Errorf("usage -o json: %v %d days", err, len(u.Days))
		}
	})

	t.Run("limits reads every page", func(t *testing.T) {
		// More keys than one page of the API holds (500).
		call := func(method, path, body string) {
			req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+adminKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("%s %s: %s", method, path, resp.Status)
			}
		}
		const n = 501
		for i := range n {
			call(http.MethodPut, fmt.Sprintf("/v1/limits/page:k%03d", i), `{"limit": 1}`)
		}
		r := s.ok("limits", "--key", adminKey)
		if got := strings.Count(r.stdout, "page:k"); got != n || !strings.Contains(r.stdout, "page:k500") {
			t.Errorf("limits lists %d of the %d keys", got, n)
		}
		var list struct {
			Limits     []job.Limit `json:"limits"`
			NextCursor *string     `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(s.ok("limits", "-o", "json", "--key", adminKey).stdout), &list); err != nil ||
			len(list.Limits) < n || list.NextCursor != nil {
			t.Errorf("limits -o json: %d keys, next %v, %v; want every key as one listing", len(list.Limits), list.NextCursor, err)
		}
		for i := range n {
			call(http.MethodDelete, fmt.Sprintf("/v1/limits/page:k%03d", i), "")
		}
	})

	t.Run("schedules", func(t *testing.T) {
		r := s.ok("schedules", "create", "nightly", "0 3 * * *", "echo", "--timezone", "Europe/Berlin", "--overlap", "skip", "--input", `{"n":1}`,
			"--max-attempts", "5", "--metadata", `{"team":"data"}`)
		if !strings.Contains(r.stdout, "nightly") || !strings.Contains(r.stdout, "Europe/Berlin") || !strings.Contains(r.stdout, "skip") {
			t.Errorf("create:\n%s", r.stdout)
		}
		if r := s.cli("", "schedules", "create", "bad", "0 25 * * *", "echo"); r.code != 1 || !strings.Contains(r.stderr, "cron") {
			t.Errorf("a bad cron: exit %d %s", r.code, r.stderr)
		}
		if r := s.ok("schedules", "pause", "nightly"); !strings.Contains(r.stdout, "true") {
			t.Errorf("pause:\n%s", r.stdout)
		}
		var j struct {
			ID, Schedule string
			MaxAttempts  int               `json:"max_attempts"`
			Metadata     map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(s.ok("schedules", "trigger", "nightly", "-o", "json").stdout), &j); err != nil || j.Schedule != "nightly" ||
			j.MaxAttempts != 5 || j.Metadata["team"] != "data" {
			t.Fatalf("trigger, want the schedule's job flags on the job: %v %+v", err, j)
		}
		s.ok("schedules", "resume", "nightly")
		if r := s.ok("schedules", "ls"); !strings.Contains(r.stdout, j.ID) || !strings.Contains(r.stdout, "false") {
			t.Errorf("ls after the trigger and resume:\n%s", r.stdout)
		}
		// A page at a time, by name: the next page's command is on stderr.
		s.ok("schedules", "create", "hourly", "0 * * * *", "echo")
		first := s.ok("schedules", "ls", "--limit", "1")
		m := regexp.MustCompile(`^more: leasehold schedules ls --cursor (\S+)\n$`).FindStringSubmatch(first.stderr)
		if m == nil || !strings.Contains(first.stdout, "hourly") || strings.Contains(first.stdout, "nightly") {
			t.Fatalf("ls --limit 1:\n%s%s", first.stdout, first.stderr)
		}
		if r := s.ok("schedules", "ls", "--limit", "1", "--cursor", m[1]); !strings.Contains(r.stdout, "nightly") || strings.Contains(r.stdout, "hourly") || r.stderr != "" {
			t.Errorf("ls --cursor, the last page:\n%s%s", r.stdout, r.stderr)
		}
		s.ok("schedules", "rm", "hourly")
		if r := s.ok("schedules", "get", "nightly", "-o", "json"); !strings.Contains(r.stdout, `"last_job_id":"`+j.ID+`"`) {
			t.Errorf("get -o json: %s", r.stdout)
		}
		// update replaces the spec and keeps the history.
		if r := s.ok("schedules", "update", "nightly", "30 4 * * *", "sleep", "--input", `{"duration":"1s"}`); !strings.Contains(r.stdout, "30 4 * * *") ||
			!strings.Contains(r.stdout, "UTC") || !strings.Contains(r.stdout, "allow") || !strings.Contains(r.stdout, j.ID) || !strings.Contains(r.stdout, "sleep") {
			t.Errorf("update:\n%s", r.stdout)
		}
		if r := s.cli("", "schedules", "update", "absent", "@hourly", "echo"); r.code != 1 || !strings.Contains(r.stderr, "404") {
			t.Errorf("update of a schedule that does not exist: exit %d %s", r.code, r.stderr)
		}
		if r := s.ok("schedules", "rm", "nightly"); r.stdout != "deleted nightly\n" {
			t.Errorf("rm: %q", r.stdout)
		}
		if r := s.cli("", "schedules", "get", "nightly"); r.code != 1 || !strings.Contains(r.stderr, "404") {
			t.Errorf("get after rm: exit %d %s", r.code, r.stderr)
		}
	})
}

// proxy forwards TCP connections to an address, and can cut every one
// that is open: a dropped connection, seen from both ends.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	open  []net.Conn
	count int
}

func newProxy(t *testing.T, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.open = append(p.open, in, out)
			p.count++
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// cut closes every connection open now.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// controls returns the control characters of s but newline and tab.
func controls(s string) string {
	var out []rune
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f {
			out = append(out, r)
		}
	}
	return string(out)
}

// get shows a job's webhook and how its delivery stands.
func TestPrintJobShowsTheWebhook(t *testing.T) {
	var b bytes.Buffer
	if err := printJob(&b, job.Job{ID: "j", Webhook: &job.Webhook{URL: "https://hooks.example.com/x"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "https://hooks.example.com/x (sent when the job ends)") {
		t.Errorf("a webhook before the end:\n%s", b.String())
	}
	b.Reset()
	if err := printJob(&b, job.Job{ID: "j", Webhook: &job.Webhook{URL: "https://hooks.example.com/x", State: job.WebhookDelivered, Attempts: 2}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "https://hooks.example.com/x (delivered, 2 attempts)") {
		t.Errorf("a delivered webhook:\n%s", b.String())
	}
}
