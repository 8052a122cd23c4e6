package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/lease"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// gateUnderTest is a running chatgate on the test's Redis and NATS.
type gateUnderTest struct {
	url  string
	ks   keys.Space
	done chan error
	stop context.CancelFunc
}

func startGate(t *testing.T, args ...string) *gateUnderTest {
	t.Helper()
	prefix := testenv.Prefix(t)
	ctx, stop := context.WithCancel(t.Context())
	out := &testenv.Buffer{}
	g := &gateUnderTest{ks: keys.New(prefix), done: make(chan error, 1), stop: stop}
	go func() {
		g.done <- run(ctx, append([]string{"-addr", "127.0.0.1:0", "-redis", testenv.Redis(t).Addr(),
			"-nats", testenv.NATS(t).URL(), "-prefix", prefix}, args...), out)
	}()
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	testenv.Eventually(t, 10*time.Second, func() bool { return listening.MatchString(out.String()) }, "chatgate never listened:\n%s", out.String())
	g.url = listening.FindStringSubmatch(out.String())[1]
	t.Cleanup(func() { g.shutdown(t) })
	return g
}

// shutdown stops the gate and checks that it left nothing held or queued.
func (g *gateUnderTest) shutdown(t *testing.T) {
	t.Helper()
	g.stop()
	if err := <-g.done; err != nil {
		t.Errorf("run: %v", err)
	}
	g.done <- nil // a second shutdown finds it stopped
	rdb := testenv.Redis(t).Client(t)
	for _, k := range []string{g.ks.LeaseSet("chat"), g.ks.SemQueue("chat")} {
		if n := rdb.ZCard(context.Background(), k).Val(); n != 0 {
			t.Errorf("%s holds %d members after shutdown", k, n)
		}
	}
}

// chat asks for an answer and returns its status and the SSE events' data,
// "done" included.
func chat(ctx context.Context, url string) (int, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"?prompt=hi", nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	return resp.StatusCode, events, sc.Err()
}

// Six clients on a gate of limit 2: every one is answered in full, and no
// more than two answers stream at any moment.
func TestGateStreamsEveryAnswerWithinTheLimit(t *testing.T) {
	t.Parallel()
	g := startGate(t, "-limit", "2", "-tokens", "5", "-pace", "10ms")
	rdb := testenv.Redis(t).Client(t)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			status, events, err := chat(t.Context(), g.url)
			if err != nil || status != http.StatusOK {
				t.Errorf("client %d: status %d, err %v", i, status, err)
				return
			}
			if want := "token token token token token done"; strings.Join(events, " ") != want {
				t.Errorf("client %d got events %v, want %s", i, events, want)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		if n := rdb.ZCard(t.Context(), g.ks.LeaseSet("chat")).Val(); n > 2 {
			t.Fatalf("%d answers streaming at once, limit 2", n)
		}
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// With every slot taken for longer than max-wait, a request is answered
// 503 with a Retry-After and a problem detail.
func TestGateAnswers503AfterMaxWait(t *testing.T) {
	t.Parallel()
	g := startGate(t, "-limit", "1", "-max-wait", "200ms")
	c, err := lease.New(testenv.Redis(t).Client(t), lease.Config{Prefix: g.ks.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := c.Acquire(t.Context(), "chat", "blocker", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(context.Background(), blocker)
	resp, err := http.Get(g.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || p.Status != 503 || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, Retry-After %q, problem %+v", resp.StatusCode, resp.Header.Get("Retry-After"), p)
	}
}

// Shutting down with one answer streaming and one request in line ends
// both at once and leaves nothing held or queued (checked by shutdown).
func TestGateShutdownEndsStreamsAndWaits(t *testing.T) {
	t.Parallel()
	g := startGate(t, "-limit", "1", "-tokens", "1000", "-pace", "10ms", "-max-wait", "1m")
	rdb := testenv.Redis(t).Client(t)
	ended := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, err := chat(context.Background(), g.url)
			ended <- err
		}()
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return rdb.ZCard(t.Context(), g.ks.LeaseSet("chat")).Val() == 1 && rdb.ZCard(t.Context(), g.ks.SemQueue("chat")).Val() == 1
	}, "want one answer streaming and one request in line")
	g.shutdown(t)
	for range 2 {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("a client was still connected after shutdown")
		}
	}
}
