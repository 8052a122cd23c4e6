package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint is printed when redis-server is missing: tests fail, never skip.
const InstallHint = "redis-server not found on PATH; install it with: apt-get update && apt-get install -y redis-server"

// RedisServer is a real redis-server child process with AOF on, in its own
// directory, on a fixed port: Kill and Restart keep the port and the data.
type RedisServer struct {
	dir   string
	port  int
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

func startRedis(dir string, port int, extra ...string) (*RedisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New(InstallHint)
	}
	s := &RedisServer{dir: dir, port: port, extra: extra}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *RedisServer) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--appendonly", "yes",
		"--save", "",
		"--maxmemory-policy", "noeviction",
		"--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	cmd := exec.Command("redis-server", append(args, s.extra...)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed on purpose; the exit status says nothing
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		} else if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.Addr(), err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Addr is host:port of the server.
func (s *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Client returns a new client for the server, closed when the test ends.
func (s *RedisServer) Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill sends SIGKILL to the server and waits until it has exited: a crash,
// with no chance to flush anything.
func (s *RedisServer) Kill(t testing.TB) {
	t.Helper()
	s.close()
}

// Restart starts the server again on the same port and directory; with AOF
// it comes back with every acknowledged write.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

func (s *RedisServer) close() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// StartRedis starts a redis-server of the test's own, for tests that kill or
// restart it; it is stopped and removed when the test ends. It fsyncs every
// write, so what it acknowledged before a kill -9 is there after a restart.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := startRedis(t.TempDir(), port, "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
