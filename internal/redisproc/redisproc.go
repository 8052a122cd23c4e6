// Package redisproc runs redis-server as a child process: for tests, and
// for the dev mode that `make run` starts.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint says how to get redis-server where it is missing.
const InstallHint = "redis-server not found on PATH; install it with: apt-get update && apt-get install -y redis-server"

// Installed reports whether redis-server is on PATH.
func Installed() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Server is a redis-server child process with AOF on, in its own directory,
// on a fixed port: Kill and Restart keep the port and the data.
type Server struct {
	dir   string
	port  int
	conf  string // a config file that comes first (a Sentinel needs one), or ""
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts redis-server on 127.0.0.1:port with its data in dir, plus
// extra arguments, and waits until it answers.
func Start(dir string, port int, extra ...string) (*Server, error) {
	if !Installed() {
		return nil, errors.New(InstallHint)
	}
	// redis-server moves into --dir before it opens --logfile, which is in
	// dir too: a relative dir (the dev mode's .dev) would name the log file
	// twice over, and redis-server would refuse to start.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("redis-server dir: %w", err)
	}
	s := &Server{dir: dir, port: port, extra: extra}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) on
// 127.0.0.1:port, with conf, the configuration file it keeps (Sentinel
// rewrites it), in dir.
func StartSentinel(dir string, port int, conf string) (*Server, error) {
	if !Installed() {
		return nil, errors.New(InstallHint)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("redis-server dir: %w", err)
	}
	s := &Server{dir: dir, port: port, conf: conf, extra: []string{"--sentinel"}}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--appendonly", "yes",
		"--save", "",
		"--maxmemory-policy", "noeviction",
		"--stream-node-max-bytes", "1024", // as docs/operations.md advises
		"--zset-max-listpack-entries", "32", // likewise
		"--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	cmd := exec.Command("redis-server", append(args, s.extra...)...)
	// Ctrl-C does not reach the server: its parent stops it, last. A
	// process that dies without stopping its server (a test binary's
	// timeout panic, a kill -9) takes the server with it: the kernel sends
	// the death signal when the thread that started the child exits, so
	// that thread belongs to the goroutine that waits for the child, for
	// as long as the child lives.
	detach(cmd)
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // killed on purpose; the exit status says nothing
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			s.Kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.Addr(), err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Kill sends SIGKILL and waits until the process has exited: a crash, with
// no chance to flush anything.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop asks the server to shut down (SIGTERM: it flushes its AOF) and waits
// for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.Kill()
	}
}

// Restart starts a killed or stopped server again, on the same port and
// directory: with AOF it comes back with what it had acknowledged.
func (s *Server) Restart() error { return s.start() }

// FreePort asks the kernel for a free loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
