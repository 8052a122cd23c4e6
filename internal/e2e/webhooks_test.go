package e2e

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/webhook"
)

// A job ends, and its webhook's first try is in flight (the receiver
// holds it unanswered) when every process, the API and the worker, is
// killed -9. A fresh worker alone delivers it, with the same webhook-id
// and a valid signature; the job shows it delivered.
func TestWebhookSurvivesEveryProcessKilled(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	var mu sync.Mutex
	var ids []string
	delivered := make(chan struct{})
	var once sync.Once
	release := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		first := len(ids) == 1
		mu.Unlock()
		if first {
			select { // held: its drainer dies before any answer
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		if got := r.Header.Get("webhook-signature"); got != webhook.Sign([][]byte{key}, r.Header.Get("webhook-id"), time.Unix(ts, 0), body) {
			t.Errorf("signature %q does not verify", got)
		}
		once.Do(func() { close(delivered) })
	}))
	defer rc.Close()
	defer close(release)

	s := newSystem(t, "LEASEHOLD_WEBHOOK_ALLOW="+rc.URL+"/",
		"LEASEHOLD_WEBHOOK_SECRETS=acme:whsec_"+base64.StdEncoding.EncodeToString(key),
		"LEASEHOLD_WEBHOOK_TIMEOUT=1s")
	worker := s.start("worker")
	code, j := s.do(http.MethodPost, "/v1/jobs", `{"kind": "echo", "webhook": {"url": "`+rc.URL+`/hook"}}`)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) == 1
	}, "the webhook was never tried")
	s.waitState(j.ID, 5*time.Second, "succeeded")
	for _, cmd := range []*exec.Cmd{worker, s.api} {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = cmd.Process.Wait()
	}

	s.start("worker")
	select {
	case <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatal("a fresh worker never delivered the webhook")
	}
	mu.Lock()
	if len(ids) < 2 || ids[0] == "" || ids[len(ids)-1] != ids[0] {
		t.Errorf("webhook-ids %v: want one id on every try", ids)
	}
	mu.Unlock()
	s.start("api")
	testenv.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, "the fresh api never became ready")
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, j = s.do(http.MethodGet, "/v1/jobs/"+j.ID, "")
		return j.Webhook != nil && j.Webhook.State == "delivered"
	}, "the job never showed its webhook delivered: %+v", j.Webhook)
	if j.Webhook.Attempts < 1 {
		t.Errorf("webhook %+v", j.Webhook)
	}
}
