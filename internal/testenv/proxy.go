package testenv

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Proxy is a TCP proxy in front of a server, for tests of a network that
// loses replies: while it swallows, every byte the server sends is
// dropped, on every connection, and the client waits in vain for the
// replies of commands the server ran; a cut drops one reply and closes
// its connection, and the client learns at once that it lost it. It is
// closed when the test ends.
type Proxy struct {
	ln      net.Listener
	target  string
	swallow atomic.Bool
	cut     atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn // every connection, either side, closed with the proxy
	closed  bool
}

// StartProxy starts a proxy in front of the server at target.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address clients dial instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Swallow drops (on true) or forwards again (on false) what the server
// sends from now on. A connection whose replies were dropped is out of
// step with its client for good: a client that timed out closes it.
func (p *Proxy) Swallow(on bool) { p.swallow.Store(on) }

// Cut drops the next bytes the server sends, on whichever connection, and
// closes that connection.
func (p *Proxy) Cut() { p.cut.Store(true) }

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.keep(client, server) {
			return
		}
		p.wg.Go(func() { p.pipe(server, client, false) })
		p.wg.Go(func() { p.pipe(client, server, true) })
	}
}

// keep records the two sides of a connection to close them with the
// proxy; false (and both closed) when the proxy is closed already.
func (p *Proxy) keep(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

// pipe copies from src to dst until either side closes; then it closes
// both. Replies (from the server) are dropped while the proxy swallows,
// and a cut closes the connection instead.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && replies && p.cut.CompareAndSwap(true, false) {
			return
		}
		if n > 0 && !(replies && p.swallow.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.closed = true
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// Before calls before once, right before rdb sends the first command
// whose arguments match: a fault (a Cut, a Swallow) lands on that very
// command.
func Before(rdb redis.UniversalClient, match func(args []any) bool, before func()) {
	rdb.AddHook(&beforeHook{match: match, before: before})
}

// HasArg matches the commands with an argument (a string or bytes) equal
// to s.
func HasArg(s string) func(args []any) bool {
	return func(args []any) bool {
		for _, a := range args {
			switch a := a.(type) {
			case string:
				if a == s {
					return true
				}
			case []byte:
				if string(a) == s {
					return true
				}
			}
		}
		return false
	}
}

type beforeHook struct {
	match  func(args []any) bool
	before func()
	fired  atomic.Bool
}

func (h *beforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd.Args()) && h.fired.CompareAndSwap(false, true) {
			h.before()
		}
		return next(ctx, cmd)
	}
}

func (h *beforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
