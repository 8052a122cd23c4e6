package testenv

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSServer is an embedded nats-server on a fixed port, so Stop and Start
// look to clients like an outage and a recovery.
type NATSServer struct {
	port int

	mu  sync.Mutex
	srv *server.Server
}

func startNATS(port int) (*NATSServer, error) {
	n := &NATSServer{port: port}
	if err := n.start(); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *NATSServer) start() error {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("nats server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats server on port %d not ready", n.port)
	}
	n.mu.Lock()
	n.srv = srv
	n.mu.Unlock()
	return nil
}

// URL is the server's client URL.
func (n *NATSServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Conn returns a connection that reconnects forever, closed when the test ends.
func (n *NATSServer) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Interest reports whether some client subscribed to subject on the running
// server, so a test knows messages published from now on reach it.
func (n *NATSServer) Interest(subject string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv != nil && n.srv.GlobalAccount().SubscriptionInterest(subject)
}

// Stop shuts the server down: clients see an outage.
func (n *NATSServer) Stop(t testing.TB) {
	t.Helper()
	n.close()
}

// Start brings a stopped server back on the same port.
func (n *NATSServer) Start(t testing.TB) {
	t.Helper()
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
}

func (n *NATSServer) close() {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// StartNATS starts a NATS server of the test's own, for tests that stop it.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNATS(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	return n
}
