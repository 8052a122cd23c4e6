package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/webhook"
)

// The test vector of the Standard Webhooks specification.
func TestSignMatchesTheSpecsTestVector(t *testing.T) {
	t.Parallel()
	got := webhook.Sign([][]byte{key(t)}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	s, err := webhook.ParseSecrets(" acme:" + secret + ", beta:whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 24)) + ",acme:" + secret)
	if err != nil {
		t.Fatal(err)
	}
	if len(s["acme"]) != 2 || len(s["beta"]) != 1 || !bytes.Equal(s["acme"][0], key(t)) {
		t.Fatalf("secrets %v", s)
	}
	for _, bad := range []string{"acme", "acme:" + secret[len("whsec_"):], "acme:whsec_!!", "acme:whsec_c2hvcnQ=", "a{b}:" + secret} {
		if _, err := webhook.ParseSecrets(bad); err == nil {
			t.Errorf("%q: no error", bad)
		} else if strings.Contains(err.Error(), secret[10:]) {
			t.Errorf("%q: the error shows the secret: %v", bad, err)
		}
	}
}

// verify checks sig, a webhook-signature header, with openssl, an
// implementation of HMAC-SHA256 independent of Go's: it returns how many
// of its signatures are keyk's.
func verify(t *testing.T, keyk []byte, id, ts string, body []byte, sig string) int {
	t.Helper()
	cmd := exec.Command("openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:"+hex.EncodeToString(keyk), "-binary")
	cmd.Stdin = bytes.NewReader(append([]byte(id+"."+ts+"."), body...))
	mac, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl (apt-get install -y openssl): %v", err)
	}
	n := 0
	for s := range strings.FieldsSeq(sig) {
		if s == "v1,"+base64.StdEncoding.EncodeToString(mac) {
			n++
		}
	}
	return n
}

// A delivery carries the job object, as the API shows it, and the
// Standard Webhooks headers; with two secrets (a rotation) each signs it,
// as openssl confirms.
func TestDeliveryIsSignedAsAnIndependentVerifierChecks(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	rc := newReceiver(t, status(http.StatusNoContent))
	second := bytes.Repeat([]byte{9}, 32)
	fx.cfg.Policy.Secrets["acme"] = [][]byte{key(t), second}
	fx.worker(t, execution.Config{})
	fx.drain(t, fx.cfg)
	j := fx.submit(t, "acme", withWebhook("ok", rc.URL+"/hook"))
	j = fx.waitWebhook(t, j.ID, job.WebhookDelivered)

	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	h, body := got[0].header, got[0].body
	id, ts, sig := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id != j.Webhook.ID || id == "" {
		t.Errorf("webhook-id %q, the job's delivery is %q", id, j.Webhook.ID)
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp %q", ts)
	}
	if len(strings.Fields(sig)) != 2 || verify(t, key(t), id, ts, body, sig) != 1 || verify(t, second, id, ts, body, sig) != 1 {
		t.Errorf("webhook-signature %q is not one signature by each key", sig)
	}
	if verify(t, key(t), id, ts, append(body, ' '), sig) != 0 {
		t.Error("the signature verifies a body it did not sign")
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	m := decodeJob(t, body)
	if m["id"] != j.ID || m["state"] != "succeeded" || m["tenant"] != "acme" || m["result"] == nil {
		t.Errorf("body %s is not the ended job", body)
	}
	if in, ok := m["input"].(map[string]any); !ok || len(in) != 0 {
		t.Errorf("body %s does not show the input, {}, as the job object does", body)
	}
	// The worker as a tenant sees it: an opaque name, not its host and pid.
	if e, _ := m["execution"].(map[string]any); e == nil || e["worker"] == j.Execution.Worker ||
		!strings.HasPrefix(fmt.Sprint(e["worker"]), "worker-") {
		t.Errorf("body's execution %v names the worker %q, want an opaque name", m["execution"], j.Execution.Worker)
	}
	if j.Webhook.Attempts != 1 || len(j.Webhook.Tries) != 1 || j.Webhook.Tries[0].Status != http.StatusNoContent {
		t.Errorf("webhook %+v, want one try answered 204", j.Webhook)
	}
}

// A receiver failing twice and then answering 2xx gets exactly three
// tries of one delivery, all with one webhook-id; the job shows them, and
// its event stream still ends at its terminal state.
func TestFailingTwiceThenOKIsThreeTriesOfOneDelivery(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(map[bool]int{true: http.StatusServiceUnavailable, false: http.StatusOK}[n < 2])
	})
	fx.worker(t, execution.Config{})
	j := fx.submit(t, "acme", withWebhook("ok", rc.URL))
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, j.ID).State.Terminal() }, "job never ended")
	events := fx.rdb.XLen(context.Background(), fx.keys.JobEvents(j.Queue, j.ID)).Val()

	fx.drain(t, fx.cfg)
	j = fx.waitWebhook(t, j.ID, job.WebhookDelivered)
	got := rc.requests()
	if len(got) != 3 {
		t.Fatalf("%d tries, want 3", len(got))
	}
	for i, r := range got {
		if id := r.header.Get("webhook-id"); id != j.Webhook.ID {
			t.Errorf("try %d: webhook-id %q, want %q", i, id, j.Webhook.ID)
		}
	}
	w := j.Webhook
	if w.Attempts != 3 || len(w.Tries) != 3 || w.Tries[0].Status != 503 || w.Tries[1].Status != 503 || w.Tries[2].Status != 200 {
		t.Errorf("webhook %+v, want attempts 3 with tries 503, 503, 200", w)
	}
	if w.Tries[0].Error == "" || w.Tries[2].Error != "" || w.FirstTry == nil {
		t.Errorf("tries %+v", w.Tries)
	}
	if n := fx.rdb.XLen(context.Background(), fx.keys.JobEvents(j.Queue, j.ID)).Val(); n != events {
		t.Errorf("the job's events went from %d to %d with its webhook's tries", events, n)
	}
	if n := fx.rdb.ZCard(context.Background(), fx.keys.QueueWebhooks(j.Queue)).Val(); n != 0 {
		t.Errorf("%d deliveries left in the outbox", n)
	}
}

// A receiver that never answers holds a try for its timeout, no longer:
// with room for one try at a time, another tenant's delivery still goes
// out, and the silent receiver's request is abandoned at the timeout.
func TestSilentReceiverHoldsNoSlotPastItsTimeout(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	abandoned := make(chan struct{}, 10)
	silent := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the drainer hung up
		abandoned <- struct{}{}
	})
	ok := newReceiver(t, status(http.StatusOK))
	fx.worker(t, execution.Config{})
	a := fx.submit(t, "acme", withWebhook("ok", silent.URL))
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, a.ID).State.Terminal() }, "job never ended")

	cfg := fx.cfg
	cfg.Concurrency, cfg.Timeout = 1, 300*time.Millisecond
	fx.drain(t, cfg)
	<-silent.seen // the one slot is the silent receiver's
	b := fx.submit(t, "beta", withWebhook("ok", ok.URL))
	fx.waitWebhook(t, b.ID, job.WebhookDelivered)
	select {
	case <-abandoned:
	case <-time.After(5 * time.Second):
		t.Fatal("the silent receiver's request was never abandoned")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		w := fx.get(t, a.ID).Webhook
		return w.Attempts >= 1 && strings.Contains(w.Tries[0].Error, "no answer within 300ms")
	}, "the silent receiver's try was not recorded as a timeout")
}

// A redirect is an answer, a failed try: the drainer does not follow it.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	target := newReceiver(t, status(http.StatusOK))
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	fx.worker(t, execution.Config{})
	tried := testsignal.New()
	d := fx.drain(t, fx.cfg)
	d.OnTry(tried)
	j := fx.submit(t, "acme", withWebhook("ok", rc.URL))
	tried.Wait(t, 10*time.Second)
	tried.Wait(t, 10*time.Second)
	if n := len(target.requests()); n != 0 {
		t.Fatalf("the redirect's target got %d requests", n)
	}
	w := fx.get(t, j.ID).Webhook
	if w.State != job.WebhookPending || w.Attempts < 2 || w.Tries[0].Status != http.StatusTemporaryRedirect {
		t.Fatalf("webhook %+v, want pending after tries answered 307", w)
	}
}

// A delivery whose URL the drainer's allow-list refuses, or whose tenant
// has no secret, is not called; one that no try delivers for its window
// is failed.
func TestRefusedURLIsNeverCalledAndTheWindowEndsInFailed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	rc := newReceiver(t, status(http.StatusOK))
	fx.worker(t, execution.Config{})
	cfg := fx.cfg
	cfg.Window = 200 * time.Millisecond
	cfg.Policy.Allow.Loopback = false // the URL was allowed at submit, not any more
	fx.drain(t, cfg)
	a := fx.submit(t, "acme", withWebhook("ok", rc.URL))
	b := fx.submit(t, "nosecret", withWebhook("ok", rc.URL))
	for _, id := range []string{a.ID, b.ID} {
		w := fx.waitWebhook(t, id, job.WebhookFailed).Webhook
		if w.Attempts < 2 || !strings.Contains(w.Tries[0].Error, "LEASEHOLD_WEBHOOK_ALLOW") {
			t.Errorf("job %s: webhook %+v", id, w)
		}
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}
}

// Every way a job ends adds exactly one delivery to the outbox, in the
// step that ends it: succeeded, failed, cancelled while queued or while
// waiting (the wait itself adds none), expired at
// max_wait, failed with its lease lost. A job without a webhook adds none;
// a retried job that ends again has a new delivery, with a new id.
func TestEveryTerminalPathAddsOneDelivery(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	ctx := context.Background()
	url := "http://127.0.0.1:1/hook"
	outbox := fx.keys.QueueWebhooks(job.DefaultQueue)
	ended := func(j job.Job, state job.State) job.Job {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() bool { return fx.get(t, j.ID).State == state }, "job %s never %s", j.ID, state)
		j = fx.get(t, j.ID)
		if _, err := fx.rdb.ZScore(ctx, outbox, j.Tenant+"/"+j.ID).Result(); err != nil {
			t.Errorf("job %s (%s): not in the outbox: %v", j.ID, state, err)
		}
		if w := j.Webhook; w == nil || w.State != job.WebhookPending || w.Attempts != 0 || !strings.HasSuffix(w.ID, "_1") {
			t.Errorf("job %s (%s): webhook %+v, want its first delivery pending", j.ID, state, w)
		}
		return j
	}

	// Cancelled while queued and expired, before any worker runs.
	cancelled := fx.submit(t, "acme", withWebhook("ok", url))
	if _, err := fx.jobs.Cancel(ctx, "acme", cancelled.ID, false); err != nil {
		t.Fatal(err)
	}
	ended(cancelled, job.StateCancelled)
	sub := withWebhook("ok", url)
	sub.MaxWait = job.Duration(time.Millisecond)
	expired := fx.submit(t, "acme", sub)

	// Lease lost: a worker runs it, its lease is made to expire at once,
	// and a second worker's claim reaps it (its last attempt: failed).
	lost := fx.submit(t, "acme", withWebhook("block", url))
	first := fx.worker(t, execution.Config{Heartbeat: time.Hour, LeaseTTL: 3 * time.Hour, ShutdownGrace: time.Millisecond})
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, lost.ID).State == job.StateRunning }, "never ran")
	_ = first
	if err := fx.rdb.ZAdd(ctx, fx.keys.QueueLeases(job.DefaultQueue), redis.Z{Score: 1, Member: lost.ID}).Err(); err != nil {
		t.Fatal(err)
	}
	fx.worker(t, execution.Config{})
	ended(expired, job.StateExpired)
	if j := ended(lost, job.StateFailed); j.Error == nil || j.Error.Code != job.CodeLeaseLost {
		t.Errorf("lost: error %+v", j.Error)
	}

	succeeded := ended(fx.submit(t, "acme", withWebhook("ok", url)), job.StateSucceeded)
	ended(fx.submit(t, "acme", withWebhook("fail", url)), job.StateFailed)
	// Cancelled while waiting: the wait is not an end, the cancel is.
	waiting := fx.submit(t, "acme", withWebhook("wait", url))
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, waiting.ID).State == job.StateWaiting }, "never waited")
	if _, err := fx.rdb.ZScore(ctx, outbox, "acme/"+waiting.ID).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("a waiting job is in the outbox (%v): a wait is not an end", err)
	}
	if _, err := fx.jobs.Cancel(ctx, "acme", waiting.ID, false); err != nil {
		t.Fatal(err)
	}
	ended(waiting, job.StateCancelled)
	plain := fx.submit(t, "acme", job.Submission{Kind: "ok"})
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, plain.ID).State.Terminal() }, "never ended")
	if j := fx.get(t, plain.ID); j.Webhook != nil {
		t.Errorf("a job without a webhook shows %+v", j.Webhook)
	}
	if n := fx.rdb.ZCard(ctx, outbox).Val(); n != 6 {
		t.Errorf("%d deliveries in the outbox, want 6", n)
	}

	if _, err := fx.jobs.Retry(ctx, "acme", succeeded.ID, false); err == nil {
		t.Fatal("a succeeded job was retried")
	}
	again, err := fx.jobs.Retry(ctx, "acme", cancelled.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, again.ID).State == job.StateSucceeded }, "retried job never ended")
	if w := fx.get(t, again.ID).Webhook; !strings.HasSuffix(w.ID, "_2") || w.State != job.WebhookPending {
		t.Errorf("retried job: webhook %+v, want its second delivery", w)
	}
	if n := fx.rdb.ZCard(ctx, outbox).Val(); n != 6 {
		t.Errorf("%d deliveries in the outbox after the retry, want 6 (one per job)", n)
	}
}

// Each try is a span in the job's trace, a child of its submit span.
func TestEachTryIsASpanOfTheJobsTrace(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	jobs := store.New(fx.rdb, store.Config{Prefix: fx.prefix, TracerProvider: tp})
	fx.jobs = jobs
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(map[bool]int{true: http.StatusBadGateway, false: http.StatusOK}[n == 0])
	})
	fx.worker(t, execution.Config{})
	cfg := fx.cfg
	cfg.TracerProvider = tp
	fx.drain(t, cfg)
	j := fx.submit(t, "acme", withWebhook("ok", rc.URL))
	j = fx.waitWebhook(t, j.ID, job.WebhookDelivered)
	var tries []tracetest.SpanStub
	testenv.Eventually(t, 5*time.Second, func() bool {
		tries = tries[:0]
		for _, s := range exp.GetSpans() {
			if s.Name == "webhook default" {
				tries = append(tries, s)
			}
		}
		return len(tries) == 2
	}, "spans of the tries: %d, want 2", len(tries))
	for _, s := range tries {
		if s.SpanContext.TraceID() != j.Trace.TraceID() || s.Parent.SpanID() != j.Trace.SpanID() {
			t.Errorf("try span %v (parent %v) is not a child of the job's submit span %v", s.SpanContext, s.Parent, j.Trace)
		}
	}
}

// One tenant's slow receiver holds at most PerTenant of the drainer's
// tries: another tenant's delivery, due after a backlog of the slow one's,
// goes out while they hang.
func TestSlowTenantHoldsOnlyItsShare(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	var mu sync.Mutex
	inFlight, most := 0, 0
	slow := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		<-r.Context().Done()
		mu.Lock()
		inFlight--
		mu.Unlock()
	})
	ok := newReceiver(t, status(http.StatusOK))
	fx.worker(t, execution.Config{})
	var backlog []job.Job
	for range 80 { // more than one read of the outbox
		backlog = append(backlog, fx.submit(t, "acme", withWebhook("ok", slow.URL)))
	}
	for _, j := range backlog {
		testenv.Eventually(t, 20*time.Second, func() bool { return fx.get(t, j.ID).State.Terminal() }, "job never ended")
	}
	b := fx.submit(t, "beta", withWebhook("ok", ok.URL))
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, b.ID).State.Terminal() }, "job never ended")
	cfg := fx.cfg
	cfg.Concurrency, cfg.PerTenant, cfg.Timeout = 4, 2, 5*time.Second
	fx.drain(t, cfg)
	// The slow tenant uses its whole share, and beta is delivered beside it.
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight == 2
	}, "the slow tenant never had 2 tries in flight")
	fx.waitWebhook(t, b.ID, job.WebhookDelivered)
	mu.Lock()
	defer mu.Unlock()
	if most != 2 {
		t.Fatalf("%d of the slow tenant's tries in flight at once, want its share, 2", most)
	}
}

// On a Redis Cluster the delivery is written, taken and recorded in the
// queue's slot as on one Redis.
func TestDeliveryOnACluster(t *testing.T) {
	t.Parallel()
	fx := newFixtureOn(t, testenv.Cluster(t).Client(t))
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(map[bool]int{true: http.StatusInternalServerError, false: http.StatusOK}[n == 0])
	})
	fx.worker(t, execution.Config{})
	fx.drain(t, fx.cfg)
	j := fx.submit(t, "acme", withWebhook("ok", rc.URL))
	if w := fx.waitWebhook(t, j.ID, job.WebhookDelivered).Webhook; w.Attempts != 2 {
		t.Fatalf("webhook %+v, want delivered at the second try", w)
	}
}

// One read of the outboxes starts a try of each due delivery, once: a
// delivery taken is held, so the next read leaves it alone.
func TestRunOnceTakesEachDueDeliveryOnce(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	rc := newReceiver(t, status(http.StatusOK))
	fx.worker(t, execution.Config{})
	j, d, tried := fx.ended(t, "acme", withWebhook("ok", rc.URL))
	ctx := context.Background()
	if n, err := d.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("first read: %d tries started, %v", n, err)
	}
	if n, err := d.RunOnce(ctx); n != 0 || err != nil {
		t.Fatalf("second read: %d tries started, %v: the taken delivery was not held", n, err)
	}
	tried.Wait(t, 10*time.Second)
	if w := fx.get(t, j.ID).Webhook; w.State != job.WebhookDelivered || len(rc.requests()) != 1 {
		t.Fatalf("webhook %+v after %d requests", w, len(rc.requests()))
	}
}

// A job whose delivery is pending is not folded: the fold passes over it
// (a drainer of the versions before the fold's would send its folded
// fields as null), and folds it once its delivery has ended, though the
// fold's progress is past it by then.
//
// Fails when the fold takes a job whose delivery is pending, or never
// comes back to one it passed over.
func TestPendingDeliveryIsFoldedOnceItEnds(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(map[bool]int{true: http.StatusServiceUnavailable, false: http.StatusOK}[n == 0])
	})
	fx.worker(t, execution.Config{FoldAfter: time.Millisecond})
	sub := withWebhook("ok", rc.URL)
	sub.Metadata = json.RawMessage(`{"note":"` + strings.Repeat("m", 100) + `"}`) // folded
	j, d, tried := fx.ended(t, "acme", sub)
	ctx := context.Background()
	if n, err := d.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("first try: %d started, %v", n, err)
	}
	tried.Wait(t, 10*time.Second) // 503: the delivery is pending
	// A job that ended after it, without a webhook: folding it takes the
	// fold's progress past the first.
	after := fx.submit(t, "acme", job.Submission{Kind: "ok", Metadata: sub.Metadata})
	testenv.Eventually(t, 10*time.Second, func() bool { return fx.get(t, after.ID).State.Terminal() }, "job never ended")
	before := fx.get(t, j.ID)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return fx.rdb.Exists(ctx, fx.keys.JobFolded(after.Queue, after.ID)).Val() == 1
	}, "the job after it not folded")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return fx.rdb.ZScore(ctx, fx.keys.QueueFoldLater(j.Queue), j.ID).Err() == nil ||
			fx.rdb.Exists(ctx, fx.keys.JobFolded(j.Queue, j.ID)).Val() == 1
	}, "the job whose delivery is pending neither passed over nor folded")
	if fx.rdb.Exists(ctx, fx.keys.JobFolded(j.Queue, j.ID)).Val() != 0 || fx.rdb.HExists(ctx, fx.keys.Job(j.Queue, j.ID), "folded").Val() {
		t.Fatal("a job whose delivery is pending was folded")
	}
	retireAt := fx.rdb.ZScore(ctx, fx.keys.QueueRetired(j.Queue), j.ID).Val()
	if to, _ := fx.rdb.HGet(ctx, fx.keys.QueueStats(j.Queue), "folded_to").Float64(); to < retireAt {
		t.Fatalf("folded_to %.0f, want past the job passed over (%.0f)", to, retireAt)
	}

	tryAgain(t, d, tried)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return fx.rdb.Exists(ctx, fx.keys.JobFolded(j.Queue, j.ID)).Val() == 1
	}, "delivered, the job is still not folded")
	if fx.rdb.ZScore(ctx, fx.keys.QueueFoldLater(j.Queue), j.ID).Err() == nil {
		t.Fatal("folded, the job is left in fold_later")
	}
	got := fx.get(t, j.ID)
	if w := got.Webhook; w.State != job.WebhookDelivered || len(w.Tries) != 2 || w.Tries[0].Status != 503 || w.Tries[1].Status != 200 {
		t.Fatalf("webhook %+v, want delivered, tries 503 then 200", w)
	}
	if string(got.Metadata) != string(before.Metadata) || string(got.Result) != string(before.Result) {
		t.Fatalf("folded: metadata %s, result %s; want %s, %s", got.Metadata, got.Result, before.Metadata, before.Result)
	}
}

// tryAgain has d start the next try of the one delivery it holds once its
// backoff is over, and waits for the try's record.
func tryAgain(t *testing.T, d *webhook.Drainer, tried *testsignal.Signal) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool {
		n, err := d.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}, "next try never started")
	tried.Wait(t, 10*time.Second)
}

// A delivery tried again after its job was folded (its tries, long, moved
// to the job's folded key), as a worker of the versions before this one's
// folds it, keeps the tries before the fold, and its request carries the
// job as it was.
func TestTryAfterTheFoldKeepsTheTriesBefore(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(map[bool]int{true: http.StatusServiceUnavailable, false: http.StatusOK}[n == 0])
	})
	fx.worker(t, execution.Config{}) // folds a minute after the end: not yet
	sub := withWebhook("ok", rc.URL)
	sub.Metadata = json.RawMessage(`{"note":"` + strings.Repeat("m", 100) + `"}`) // folded too
	j, d, tried := fx.ended(t, "acme", sub)
	ctx := context.Background()
	if n, err := d.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("first try: %d started, %v", n, err)
	}
	tried.Wait(t, 10*time.Second)

	// This version's fold waits for the delivery's end: the delivery is
	// pending again once it is folded, as an older fold leaves it (one
	// that does not pack it: a refused cancel unpacks it).
	hash := fx.keys.Job(j.Queue, j.ID)
	fx.rdb.HSet(ctx, hash, "webhook_state", "delivered")
	fx.worker(t, execution.Config{FoldAfter: time.Millisecond})
	testenv.Eventually(t, 10*time.Second, func() bool {
		return fx.rdb.Exists(ctx, fx.keys.JobFolded(j.Queue, j.ID)).Val() == 1 && fx.rdb.Exists(ctx, hash).Val() == 0
	}, "job not folded and packed")
	if _, err := fx.jobs.Cancel(ctx, "acme", j.ID, false); !errors.Is(err, job.ErrConflict) {
		t.Fatal(err)
	}
	fx.rdb.HSet(ctx, hash, "webhook_state", "pending")
	if fx.rdb.HExists(ctx, hash, "webhook_tries").Val() {
		t.Fatal("the tries, longer than a listpack's values, left in the hash by the fold")
	}
	tryAgain(t, d, tried)
	w := fx.get(t, j.ID).Webhook
	if w.State != job.WebhookDelivered || w.Attempts != 2 || len(w.Tries) != 2 || w.Tries[0].Status != 503 || w.Tries[1].Status != 200 {
		t.Fatalf("webhook %+v, want delivered, tries 503 then 200", w)
	}
	got := rc.requests()
	first, second := decodeJob(t, got[0].body), decodeJob(t, got[1].body)
	if fmt.Sprint(first["metadata"]) != fmt.Sprint(map[string]any{"note": strings.Repeat("m", 100)}) {
		t.Fatalf("first request: metadata %v", first["metadata"])
	}
	for _, name := range []string{"result", "metadata", "state", "error", "created_at"} {
		if a, b := fmt.Sprint(first[name]), fmt.Sprint(second[name]); a != b {
			t.Errorf("%s: %s before the fold, %s after", name, a, b)
		}
	}
}

// A try's error is the tenant's to read, so it never quotes the far end:
// an endpoint that answers with something other than HTTP (a banner) is
// "connection failed", one with a made-up reason phrase its status code
// only; what the far end sent goes to the log.
func TestTryErrorQuotesNothingTheFarEndSent(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	banner := rawReceiver(t, "SSH-2.0-OpenSSH_9.6 db-internal-7\r\n")
	reason := rawReceiver(t, "HTTP/1.1 500 db-internal-7 refused\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	fx.worker(t, execution.Config{})
	logs := &testenv.Buffer{}
	cfg := fx.cfg
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	fx.drain(t, cfg)
	for url, want := range map[string]string{banner: "connection failed", reason: "answered HTTP 500"} {
		j := fx.submit(t, "acme", withWebhook("ok", url))
		testenv.Eventually(t, 10*time.Second, func() bool {
			w := fx.get(t, j.ID).Webhook
			return w != nil && w.Attempts >= 1
		}, "no try of %s recorded", url)
		if got := fx.get(t, j.ID).Webhook.Tries[0].Error; got != want {
			t.Errorf("try of %s: error %q, want %q", url, got, want)
		}
	}
	if len(logs.Lines("webhook: try failed", "db-internal-7")) == 0 {
		t.Errorf("the banner is not in the log:\n%s", logs)
	}
}

// rawReceiver is a TCP server that reads a request's head, answers it
// with answer, whatever it was, and hangs up; it returns its URL.
func rawReceiver(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				head := bufio.NewReader(c)
				for line, err := "", error(nil); err == nil && line != "\r\n"; line, err = head.ReadString('\n') {
				}
				_, _ = c.Write([]byte(answer))
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook"
}
