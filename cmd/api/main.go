// Command api serves Leasehold's HTTP API (docs/openapi.yaml) on Redis and
// NATS. It is stateless: run as many replicas as you need behind a load
// balancer. It refuses to start without API keys; the dev mode, which
// generates one, lives in cmd/leasehold.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/oklog/run"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/httpapi"
)

func main() { os.Exit(cli.Code("api", runAPI(context.Background(), os.Args[1:], os.Stderr))) }

func runAPI(ctx context.Context, args []string, stderr io.Writer) error {
	fs := cli.NewFlags("api", stderr)
	addr := fs.String("addr", "LEASEHOLD_ADDR", "127.0.0.1:8080", "listen address")
	redisURL := fs.String("redis-url", "LEASEHOLD_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL (add ?pool_size=N for many concurrent ?wait= and event streams: each holds a connection)")
	natsURL := fs.String("nats-url", "LEASEHOLD_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	apiKeys := fs.String("api-keys", "LEASEHOLD_API_KEYS", "", "comma-separated tenant:key pairs; the tenant admin acts on every tenant's jobs (required)")
	prefix := fs.String("prefix", "LEASEHOLD_PREFIX", "", "Redis key prefix (default leasehold:)")
	maxBody := fs.Int("max-body", "LEASEHOLD_MAX_BODY", httpapi.DefaultMaxBody, "largest request body, in bytes")
	redisTimeout := fs.Duration("redis-timeout", "LEASEHOLD_REDIS_TIMEOUT", httpapi.DefaultRedisTimeout, "how long a request waits for Redis before it is answered 503")
	if err := fs.Parse(args); err != nil {
		return err
	}
	keys, err := httpapi.ParseKeys(*apiKeys)
	if err != nil {
		return fmt.Errorf("%w (set LEASEHOLD_API_KEYS or --api-keys; the dev mode generates a key)", err)
	}
	log := cli.Logger(stderr)

	rdb, err := cli.Redis(ctx, *redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	nc, err := cli.NATS(*natsURL, "leasehold-api", log)
	if err != nil {
		return err
	}
	defer nc.Close()

	meters, metrics, err := cli.Metrics()
	if err != nil {
		return err
	}
	defer meters.Shutdown(context.WithoutCancel(ctx))

	handler, err := httpapi.New(httpapi.Config{
		Redis:         rdb,
		NATS:          nc,
		Prefix:        *prefix,
		Keys:          keys,
		MaxBody:       int64(*maxBody),
		RedisTimeout:  *redisTimeout,
		Logger:        log,
		MeterProvider: meters,
		Metrics:       metrics,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	log.Info("api listening", "addr", ln.Addr().String(), "tenants", keys.Len())

	var g run.Group
	g.Add(cli.Serve(ctx, ln, handler, log)) // graceful shutdown, then cut streams and waits
	g.Add(run.SignalHandler(ctx, syscall.SIGINT, syscall.SIGTERM))
	return g.Run()
}
