package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m, map[string]func() int{
		"echo": func() int {
			rdb := testenv.HelperRedis()
			defer rdb.Close()
			fmt.Println("pong", rdb.Ping(context.Background()).Val())
			time.Sleep(time.Minute)
			return 0
		},
	})
}

func TestBackendsWrite(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			p := testenv.Prefix(t)
			for i := range 20 {
				k := fmt.Sprintf("%s{k%d}", p, i)
				if err := b.Client.Set(ctx, k, i, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRedisKillRestartKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	if err := rdb.Ping(t.Context()).Err(); err == nil {
		t.Fatal("ping succeeded against a killed redis")
	}
	srv.Restart(t)
	if got := rdb.Get(t.Context(), "k").Val(); got != "v" {
		t.Fatalf("after restart k = %q, want v", got)
	}
}

func TestNATSStopStart(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t)
	nc := srv.Conn(t)
	srv.Stop(t)
	testenv.Eventually(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "client still connected")
	srv.Start(t)
	testenv.Eventually(t, 5*time.Second, func() bool { return nc.Status() == nats.CONNECTED }, "client did not reconnect")
}

func TestHelperKill(t *testing.T) {
	t.Parallel()
	p := testenv.StartHelper(t, "echo")
	if got := p.Line(t, "pong ", 10*time.Second); got != "PONG" {
		t.Fatalf("helper said %q", got)
	}
	p.Kill(t)
}
