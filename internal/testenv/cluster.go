package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// RedisCluster is a local Redis Cluster of three masters, with no
// replicas or one for each.
type RedisCluster struct {
	nodes []*RedisServer
}

// startCluster starts three masters and replicas replicas of each, with
// extra arguments for every node.
func startCluster(dir string, replicas int, extra ...string) (*RedisCluster, error) {
	c := &RedisCluster{}
	var addrs []string
	for i := range 3 * (1 + replicas) {
		port, err := clusterPort()
		if err != nil {
			c.close()
			return nil, err
		}
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			c.close()
			return nil, err
		}
		args := []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "2000"}
		n, err := startRedis(nodeDir, port, append(args, extra...)...)
		if err != nil {
			c.close()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		addrs = append(addrs, n.Addr())
	}
	out, err := exec.Command("redis-cli", append([]string{"--cluster", "create"},
		append(addrs, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")...)...).CombinedOutput()
	if err != nil {
		c.close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitReady(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// waitReady waits until every node reports cluster_state:ok and a cluster
// client can write to keys on every node.
func (c *RedisCluster) waitReady() error {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	client := redis.NewClusterClient(c.Options())
	defer client.Close()
	for {
		err := c.ready(ctx, client)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redis cluster not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *RedisCluster) ready(ctx context.Context, client *redis.ClusterClient) error {
	for _, n := range c.nodes {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaintNotificationsConfig: noMaintNotifications})
		info, err := nc.ClusterInfo(ctx).Result()
		var repl string
		if err == nil {
			repl, err = nc.Info(ctx, "replication").Result()
		}
		nc.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("node %s: cluster_state not ok", n.Addr())
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("replica %s: not in sync", n.Addr())
		}
	}
	// Keys a, b and c hash to slots on three different masters.
	for _, k := range []string{"a", "b", "c"} {
		if err := client.Set(ctx, k, "1", time.Second).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Addrs are the nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// noMaintNotifications turns off go-redis's maintenance notifications
// for clients of cluster nodes: Redis 7 sends none, and go-redis leaves a
// goroutine running after Close for each node client that has them on.
var noMaintNotifications = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

// Options are a cluster client's options for c (see noMaintNotifications),
// reloading the slots' map as often as the binaries' clients do (cli.ClusterReload).
func (c *RedisCluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), MaintNotificationsConfig: noMaintNotifications,
		ClusterStateReloadInterval: 2 * time.Second}
}

// Client returns a new cluster client, closed when the test ends.
func (c *RedisCluster) Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	client := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { client.Close() })
	return client
}

func (c *RedisCluster) close() {
	for _, n := range c.nodes {
		n.close()
	}
}

// clusterPort finds a port p where p and p+10000 (the cluster bus) are free.
func clusterPort() (int, error) {
	for range 100 {
		p := 20000 + rand.IntN(25000)
		if free(p) && free(p+10000) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Node returns the node at addr.
func (c *RedisCluster) Node(t testing.TB, addr string) *RedisServer {
	t.Helper()
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	t.Fatalf("no cluster node at %s", addr)
	return nil
}

// MasterOf returns the node serving key's slot now, and its replica (nil
// when the cluster has none). A replica may take a moment to show in the
// slots' map after it joined.
func (c *RedisCluster) MasterOf(t testing.TB, key string) (master, replica *RedisServer) {
	t.Helper()
	ctx := t.Context()
	client := redis.NewClusterClient(c.Options())
	defer client.Close()
	slot, err := client.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() bool {
		shards, err := client.ClusterShards(ctx).Result()
		if err != nil {
			return false
		}
		for _, sh := range shards {
			if !slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
				continue
			}
			master, replica = nil, nil
			for _, n := range sh.Nodes {
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				switch {
				case n.Role == "master":
					master = c.Node(t, addr)
				case n.Health == "online":
					replica = c.Node(t, addr)
				}
			}
			return master != nil && (replica != nil || len(c.nodes) == 3)
		}
		return false
	}, "no node, or no replica, serves slot %d", slot)
	return master, replica
}
