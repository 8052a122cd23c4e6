// Package testenv runs tests against real parts: one redis-server child
// process and one embedded nats-server per test binary, a three-master Redis
// Cluster on demand, servers of a test's own for fault tests, and helper
// subprocesses (the test binary itself, re-executed) that can be killed with
// SIGKILL or paused with SIGSTOP.
//
// A package uses it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m, nil) }
//
// Tests never skip: without redis-server they fail and print how to install it.
package testenv

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Environment variables through which a helper subprocess learns its role
// and the parent's servers.
const (
	envHelper    = "LEASEHOLD_TEST_HELPER"
	envRedisAddr = "LEASEHOLD_TEST_REDIS"
	envNATSURL   = "LEASEHOLD_TEST_NATS"
)

var shared struct {
	dir   string
	redis *RedisServer
	nats  *NATSServer

	clusterOnce sync.Once
	cluster     *RedisCluster
	clusterErr  error
}

var prefixSeq atomic.Int64

// Main starts the shared servers, runs the tests, stops the servers and then
// checks for leaked goroutines. When the binary was started as a helper
// subprocess (see StartHelper), it runs that helper instead and exits with
// its code.
func Main(m *testing.M, helpers map[string]func() int) { os.Exit(Run(m, helpers)) }

// Run is Main for a TestMain that has cleanup of its own to do after the
// tests: it returns the exit code instead of exiting.
func Run(m *testing.M, helpers map[string]func() int) int {
	if name := os.Getenv(envHelper); name != "" {
		h, ok := helpers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "testenv: unknown helper %q\n", name)
			return 2
		}
		return h()
	}
	return run(m)
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leasehold-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	shared.dir = dir

	port, err := freePort()
	if err == nil {
		shared.redis, err = startRedis(dir, port)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}

	if port, err = freePort(); err == nil {
		shared.nats, err = startNATS(port)
	}
	if err != nil {
		shared.redis.close()
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}

	code := m.Run()
	shared.nats.close()
	shared.redis.close()
	if shared.cluster != nil {
		shared.cluster.close()
	}
	// Servers are down, so every goroutine still alive belongs to the code under test.
	if code == 0 {
		// go-redis retries a failed dial from a goroutine that sleeps a
		// second between tries and exits on its own once its pool is closed:
		// after a test that killed Redis, it may still be asleep here.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// Redis is the test binary's shared redis-server. Tests that kill or restart
// Redis use StartRedis instead.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	if shared.redis == nil {
		t.Fatal("testenv: no shared redis-server: call testenv.Main from TestMain")
	}
	return shared.redis
}

// NATS is the test binary's shared NATS server. Tests that stop NATS use
// StartNATS instead.
func NATS(t testing.TB) *NATSServer {
	t.Helper()
	if shared.nats == nil {
		t.Fatal("testenv: no shared NATS server: call testenv.Main from TestMain")
	}
	return shared.nats
}

// Cluster is the test binary's three-master Redis Cluster, started on first use.
func Cluster(t testing.TB) *RedisCluster {
	t.Helper()
	shared.clusterOnce.Do(func() {
		shared.cluster, shared.clusterErr = startCluster(shared.dir, 0)
	})
	if shared.clusterErr != nil {
		t.Fatal("testenv:", shared.clusterErr)
	}
	return shared.cluster
}

// StartCluster starts a three-master Redis Cluster of the test's own, for
// benchmarks that want empty ones; it is stopped and removed when the test
// ends.
func StartCluster(t testing.TB) *RedisCluster {
	t.Helper()
	c, err := startCluster(t.TempDir(), 0)
	if err != nil {
		t.Fatal("testenv:", err)
	}
	t.Cleanup(c.close)
	return c
}

// StartClusterWithReplicas starts a Redis Cluster of the test's own: three
// masters, each with one replica, that fail over quickly (a node is
// failing after a second unanswered; a replica may take over however long
// it lagged). It is stopped and removed when the test ends.
func StartClusterWithReplicas(t testing.TB) *RedisCluster {
	t.Helper()
	c, err := startCluster(t.TempDir(), 1, "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0",
		"--appendfsync", "everysec")
	if err != nil {
		t.Fatal("testenv:", err)
	}
	t.Cleanup(c.close)
	return c
}

// Backend is a Redis deployment a test runs against.
type Backend struct {
	Name   string
	Client redis.UniversalClient
}

// Backends returns a client for the single redis-server and one for the
// Redis Cluster, so a test can prove its scripts on both.
func Backends(t testing.TB) []Backend {
	t.Helper()
	return []Backend{
		{Name: "redis", Client: Redis(t).Client(t)},
		{Name: "cluster", Client: Cluster(t).Client(t)},
	}
}

// Prefix returns a key prefix no other test uses, so tests share a Redis and
// run in parallel.
func Prefix(t testing.TB) string {
	return "lhtest:" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatInt(prefixSeq.Add(1), 10) + ":"
}

// Eventually waits until cond holds, checking every few milliseconds, and
// fails the test with msg when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
