package testenv

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/redisproc"
)

// InstallHint is printed when redis-server is missing: tests fail, never skip.
const InstallHint = redisproc.InstallHint

// RedisServer is a real redis-server child process with AOF on, in its own
// directory, on a fixed port: Kill and Restart keep the port and the data.
type RedisServer struct {
	*redisproc.Server
}

func startRedis(dir string, port int, extra ...string) (*RedisServer, error) {
	s, err := redisproc.Start(dir, port, extra...)
	if err != nil {
		return nil, err
	}
	return &RedisServer{s}, nil
}

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
	s.Server.Kill()
}

// Restart starts the server again on the same port and directory; with AOF
// it comes back with every acknowledged write.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	if err := s.Server.Restart(); err != nil {
		t.Fatal(err)
	}
}

func (s *RedisServer) close() { s.Server.Kill() }

// StartRedis starts a redis-server of the test's own, for tests that kill or
// restart it, or benchmarks that want an empty one; it is stopped and
// removed when the test ends. It fsyncs every write, so what it
// acknowledged before a kill -9 is there after a restart; extra
// arguments override that and any other default (a benchmark passes
// "--appendfsync", "everysec" to measure the shared server's setting).
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := startRedis(t.TempDir(), port, append([]string{"--appendfsync", "always"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func freePort() (int, error) { return redisproc.FreePort() }

// StartReplica starts a redis-server of the test's own that replicates
// primary, and waits until it is in sync.
func StartReplica(t testing.TB, primary *RedisServer) *RedisServer {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary.Addr())
	r := StartRedis(t, "--replicaof", host, port)
	c := r.Client(t)
	Eventually(t, 30*time.Second, func() bool {
		info, err := c.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "replica %s never synced with %s", r.Addr(), primary.Addr())
	return r
}
