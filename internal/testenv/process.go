package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Process is a helper subprocess: this test binary, started again in the
// role of one of the helpers given to Main. It is a real process, so a test
// can SIGKILL it (a crash) or SIGSTOP it (a GC pause, a partition).
type Process struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	// read says a test took Lines and reads every line itself: kill must
	// not drain them from under it (a line it took would be lost).
	read atomic.Bool
}

// StartHelper starts the helper called name with the shared Redis and NATS
// addresses plus env ("KEY=value") in its environment; its stdout lines are
// readable with Line. It is killed when the test ends.
func StartHelper(t testing.TB, name string, env ...string) *Process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envHelper+"="+name,
		envRedisAddr+"="+Redis(t).Addr(),
		envNATSURL+"="+NATS(t).URL())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		// Wait closes stdout: only once every line has been read.
		_ = cmd.Wait() // the exit status of a killed helper says nothing
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// Line waits for the next stdout line that starts with prefix, discarding
// others, and returns it without the prefix.
func (p *Process) Line(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q", prefix)
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-deadline:
			t.Fatalf("helper printed no %q within %v", prefix, timeout)
		}
	}
}

// Lines returns the channel of the process's stdout lines, closed when its
// stdout closes. A test that reads it must keep reading until it closes: a
// helper blocks once it has printed more than the buffer holds, and Kill
// leaves the lines to it.
func (p *Process) Lines() <-chan string {
	p.read.Store(true)
	return p.lines
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	p.kill()
}

// kill kills the process and, unless a test reads its lines (Lines), drains
// what it printed, so the reader is never stuck on a full buffer and the
// process can be waited for.
func (p *Process) kill() {
	_ = p.cmd.Process.Kill()
	if !p.read.Load() {
		for range p.lines {
		}
	}
	<-p.done
}

// Stop pauses the process with SIGSTOP.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Cont resumes a process paused by Stop.
func (p *Process) Cont(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Signal sends sig to the process (SIGTERM for a graceful shutdown).
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Wait waits for the process to exit on its own and returns its exit code.
func (p *Process) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	deadline := time.After(timeout)
	lines := p.lines
	if p.read.Load() {
		lines = nil // the test reads them
	}
	for {
		select {
		case _, ok := <-lines: // drained so the helper never blocks on stdout
			if !ok {
				lines = nil
			}
		case <-p.done:
			return p.cmd.ProcessState.ExitCode()
		case <-deadline:
			t.Fatalf("helper still running after %v", timeout)
			return -1
		}
	}
}

// HelperRedis is, inside a helper subprocess, a client for the parent's Redis.
func HelperRedis() redis.UniversalClient {
	return redis.NewClient(&redis.Options{Addr: os.Getenv(envRedisAddr)})
}

// HelperNATSURL is, inside a helper subprocess, the parent's NATS URL.
func HelperNATSURL() string { return os.Getenv(envNATSURL) }
