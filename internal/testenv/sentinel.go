package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/redisproc"
)

// SentinelMaster is the name the Sentinels of a SentinelGroup watch.
const SentinelMaster = "leasehold"

// SentinelGroup is a primary, two replicas and three Sentinels watching
// them, all redis-server processes of the test's own. The Sentinels fail
// over quickly: the primary is down after a second unanswered.
type SentinelGroup struct {
	Servers   []*RedisServer // Servers[0] is the first primary
	Sentinels []*RedisServer
}

// StartSentinelGroup starts a SentinelGroup, waits until every Sentinel
// knows both replicas and the two other Sentinels, and stops it when the
// test ends.
func StartSentinelGroup(t testing.TB) *SentinelGroup {
	t.Helper()
	// everysec: the test is of replication, and "always" would make the
	// load the test runs slow.
	primary := StartRedis(t, "--appendfsync", "everysec")
	g := &SentinelGroup{Servers: []*RedisServer{primary, StartReplica(t, primary), StartReplica(t, primary)}}
	host, port, _ := net.SplitHostPort(primary.Addr())
	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s %s %s 2\nsentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 5000\nsentinel parallel-syncs %[1]s 2\n", SentinelMaster, host, port)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s, err := redisproc.StartSentinel(dir, p, conf)
		if err != nil {
			t.Fatal(err)
		}
		rs := &RedisServer{s}
		t.Cleanup(rs.close)
		g.Sentinels = append(g.Sentinels, rs)
	}
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		Eventually(t, 30*time.Second, func() bool {
			m, err := c.Master(t.Context(), SentinelMaster).Result()
			replicas, rerr := c.Replicas(t.Context(), SentinelMaster).Result()
			return err == nil && rerr == nil && m["num-other-sentinels"] == "2" && len(replicas) == 2
		}, "sentinel %s never saw the group", s.Addr())
		c.Close()
	}
	return g
}

// SentinelAddrs are the Sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new client that follows the group's primary through
// its failovers, closed when the test ends.
func (g *SentinelGroup) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: g.SentinelAddrs(),
		ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// Primary returns the server the Sentinels name as the primary now.
func (g *SentinelGroup) Primary(t testing.TB) *RedisServer {
	t.Helper()
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		addr, err := c.GetMasterAddrByName(t.Context(), SentinelMaster).Result()
		c.Close()
		if err != nil {
			continue
		}
		for _, r := range g.Servers {
			if r.Addr() == net.JoinHostPort(addr[0], addr[1]) {
				return r
			}
		}
	}
	t.Fatal("no sentinel names a primary of the group")
	return nil
}

// AwaitFailover waits until the Sentinels have promoted a server other
// than old and it serves as the primary, and returns it.
func (g *SentinelGroup) AwaitFailover(t testing.TB, old *RedisServer, timeout time.Duration) *RedisServer {
	t.Helper()
	var primary *RedisServer
	Eventually(t, timeout, func() bool {
		primary = g.Primary(t)
		if primary == old {
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: primary.Addr()})
		defer c.Close()
		info, err := c.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	}, "the sentinels promoted no replica of %s", old.Addr())
	return primary
}
