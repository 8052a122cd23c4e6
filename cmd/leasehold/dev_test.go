package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

// devProcess is one `leasehold dev` process of a test, in a process group
// of its own as a terminal's foreground job is.
type devProcess struct {
	cmd            *exec.Cmd
	base           string
	stdout, stderr testenv.Buffer
	exited         chan error
}

// startDev starts bin's dev mode on data, on a free port, with args.
func startDev(t *testing.T, bin, data string, args ...string) *devProcess {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := &devProcess{base: "http://" + addr, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"dev", "--addr", addr, "--metrics-addr", "127.0.0.1:0", "--data", data}, args...)...)
	p.cmd.Env = append(os.Environ(), "LEASEHOLD_HANDLERS=shout=http://127.0.0.1:9/shout")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("leasehold dev on %s:\n%s%s", data, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// banner waits for the whole banner and returns it.
func (p *devProcess) banner(t *testing.T) string {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() bool {
		select {
		case err := <-p.exited:
			t.Fatalf("dev mode exited before its banner: %v\n%s", err, p.stderr.String())
		default:
		}
		return strings.Contains(p.stdout.String(), "Ctrl-C stops everything.")
	}, "dev mode printed no banner within 60s")
	return p.stdout.String()
}

// wait waits up to within for the process to exit, and returns how.
func (p *devProcess) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		return err
	case <-time.After(within):
		t.Fatalf("dev mode still running after %v", within)
		return nil
	}
}

// interrupt sends SIGINT to the process group, as Ctrl-C does.
func (p *devProcess) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
}

// call sends a request to the API with key and decodes a JSON answer
// into v (nil: none); it returns the status.
func (p *devProcess) call(t *testing.T, method, path, key, body string, v any) int {
	t.Helper()
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Close = true // no connection outlives the test: TestMain checks for leaked goroutines
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode/100 == 2 {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// progressed waits for job id's first progress event, which only its
// running handler sends.
func (p *devProcess) progressed(t *testing.T, key, id string) {
	t.Helper()
	ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/v1/jobs/"+id+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: progress" {
			return
		}
	}
	t.Fatalf("job %s sent no progress event: %v", id, sc.Err())
}

// bannerField returns what follows label in the banner, up to a space.
func bannerField(t *testing.T, banner, label string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(label) + `(\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no %q in the banner:\n%s", label, banner)
	}
	return strings.TrimSuffix(m[1], ")")
}

// The dev mode through restarts on one data directory: the banner says
// where Redis and NATS are and what is served; a second instance is
// refused before it starts anything; Ctrl-C says what it waits for, a
// second one hands the running job back at once, and the stop exits 0;
// the keys are the same at the next start, after a kill -9 (whose lock
// the kernel released) too; --api-keys pins other keys without changing
// the kept ones.
func TestDevModeLifecycle(t *testing.T) {
	if !redisproc.Installed() {
		t.Fatal(redisproc.InstallHint)
	}
	bin := filepath.Join(t.TempDir(), "leasehold")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := t.TempDir()

	first := startDev(t, bin, data)
	banner := first.banner(t)
	key, adminKey := bannerField(t, banner, "key "), bannerField(t, banner, "Admin    key ")
	redisURL, natsURL := bannerField(t, banner, "Redis    "), bannerField(t, banner, "NATS     ")
	if !strings.HasPrefix(redisURL, "redis://127.0.0.1:") || !strings.HasPrefix(natsURL, "nats://127.0.0.1:") {
		t.Errorf("Redis at %q, NATS at %q", redisURL, natsURL)
	}
	if want := fmt.Sprintf("LEASEHOLD_REDIS_URL=%s LEASEHOLD_NATS_URL=%s go run ./cmd/worker", redisURL, natsURL); !strings.Contains(banner, want) {
		t.Errorf("no line %q for another worker in the banner:\n%s", want, banner)
	}
	if !strings.Contains(banner, `kinds: echo, sleep, llm.chat, shout (remote)`) {
		t.Errorf("the banner does not list every kind served:\n%s", banner)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Errorf("the banner's Redis URL: %v", err)
	}
	rdb.Close()
	if st, err := os.Stat(filepath.Join(data, credentialsFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file: %v %v, want mode 0600", st, err)
	}

	// A second instance on the same data is refused before it starts
	// a redis-server of its own, naming the first.
	second := startDev(t, bin, data)
	if err := second.wait(t, 30*time.Second); err == nil {
		t.Fatal("a second dev mode on the same data started")
	}
	for _, want := range []string{"pid " + strconv.Itoa(first.cmd.Process.Pid), first.base} {
		if !strings.Contains(second.stderr.String(), want) {
			t.Errorf("the refusal does not name the first instance's %s:\n%s", want, second.stderr.String())
		}
	}
	log, err := os.ReadFile(filepath.Join(data, "redis", "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "Server initialized"); n != 1 {
		t.Errorf("redis-server started %d times on the data, want once", n)
	}

	// Ctrl-C with a job running says what it waits for; Ctrl-C again
	// hands the job back at once, long before the 30s grace.
	var j struct {
		ID, State string
		Attempt   int
	}
	if code := first.call(t, http.MethodPost, "/v1/jobs", key, `{"kind":"sleep","input":{"duration":"60s","tick":"1s"}}`, &j); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	first.progressed(t, key, j.ID) // its handler runs: the worker counts it
	first.interrupt(t)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return len(first.stderr.Lines("waiting up to 30s for 1 running job; Ctrl-C again hands them back now")) == 1
	}, "Ctrl-C did not say what it waits for")
	first.interrupt(t)
	if err := first.wait(t, 15*time.Second); err != nil {
		t.Fatalf("dev mode exited with %v after Ctrl-C, want 0", err)
	}

	// The next start has the same keys; the job handed back runs again,
	// on its first attempt still.
	again := startDev(t, bin, data)
	if b := again.banner(t); bannerField(t, b, "key ") != key || bannerField(t, b, "Admin    key ") != adminKey {
		t.Fatalf("keys changed across a restart:\n%s\nthen:\n%s", banner, b)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		again.call(t, http.MethodGet, "/v1/jobs/"+j.ID, key, "", &j)
		return j.State == "running"
	}, "the job handed back never ran again")
	if j.Attempt != 1 {
		t.Errorf("the handed-back job runs attempt %d, want 1", j.Attempt)
	}
	again.call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", key, "", nil)

	// kill -9: the kernel releases the lock, and the next start takes it.
	if err := again.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	again.wait(t, 10*time.Second)
	pinned := "dev:pinned-dev-key-0123456789,admin:pinned-admin-key-0123456789"
	third := startDev(t, bin, data, "--api-keys", pinned)
	if b := third.banner(t); bannerField(t, b, "key ") != "pinned-dev-key-0123456789" {
		t.Fatalf("--api-keys did not pin the key:\n%s", b)
	}
	if code := third.call(t, http.MethodGet, "/v1/jobs/"+j.ID, key, "", nil); code != http.StatusUnauthorized {
		t.Errorf("the kept key with --api-keys pinning others: %d, want 401", code)
	}
	third.interrupt(t)
	if err := third.wait(t, 30*time.Second); err != nil {
		t.Fatalf("dev mode exited with %v after Ctrl-C, want 0", err)
	}
	last := startDev(t, bin, data)
	if b := last.banner(t); bannerField(t, b, "key ") != key {
		t.Fatalf("after a start with --api-keys, the kept key changed:\n%s", b)
	}
	last.interrupt(t)
	if err := last.wait(t, 30*time.Second); err != nil {
		t.Fatalf("dev mode exited with %v after Ctrl-C, want 0", err)
	}
}

// `make run` stopped by Ctrl-C reports no error: make is interrupted, as
// the user asked, and says nothing of a failed recipe.
func TestMakeRunStopsWithoutError(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	data := t.TempDir()
	cmd := exec.Command("make", "-C", "../..", "run", "BIN="+t.TempDir())
	cmd.Env = append(os.Environ(), "LEASEHOLD_ADDR=127.0.0.1:"+strconv.Itoa(freePort(t)), "LEASEHOLD_METRICS_ADDR=127.0.0.1:0",
		"LEASEHOLD_DEV_DATA="+data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &devProcess{cmd: cmd, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	p.banner(t)
	p.interrupt(t)
	p.wait(t, 60*time.Second)
	if strings.Contains(p.stderr.String(), "***") {
		t.Errorf("make reported an error after Ctrl-C:\n%s", p.stderr.String())
	}
}

// On the in-process stand-in, the banner's line for another worker starts
// one: cmd/worker, which checks a Redis's eviction policy at its start,
// is told the stand-in's, which it cannot ask for.
func TestDevStandInTakesAnotherWorker(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "../worker", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dev := startDev(t, filepath.Join(bin, "leasehold"), t.TempDir(), "--memory")
	m := regexp.MustCompile(`\n  (.*) go run ./cmd/worker\n`).FindStringSubmatch(dev.banner(t))
	if m == nil {
		t.Fatalf("no line for another worker in the banner:\n%s", dev.stdout.String())
	}
	ops := "127.0.0.1:" + strconv.Itoa(freePort(t))
	worker := exec.Command(filepath.Join(bin, "worker"), "--metrics-addr", ops)
	worker.Env = append(os.Environ(), strings.Fields(m[1])...)
	var out testenv.Buffer
	worker.Stdout, worker.Stderr = &out, &out
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = worker.Process.Kill()
		_ = worker.Wait()
		if t.Failed() {
			t.Logf("the worker of the banner's line (%s):\n%s", m[1], out.String())
		}
	})
	waitReady(t, ops)
}
