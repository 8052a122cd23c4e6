package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/webhook"
)

// withWebhooks lets acme's jobs have webhooks under https://hooks.example.com/.
func withWebhooks(c *httpapi.Config) {
	allow, err := kinds.ParseNotifyAllow("https://hooks.example.com/")
	if err != nil {
		panic(err)
	}
	c.Webhooks = webhook.Policy{Allow: allow, Secrets: webhook.Secrets{"acme": {bytes.Repeat([]byte{1}, 32)}}}
}

// A job's webhook is kept and shown; it is pending until the job ends.
func TestSubmitWithAWebhookShowsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withWebhooks)
	j := f.submit(acmeKey, `{"kind": "echo", "webhook": {"url": "https://hooks.example.com/done?x=1"}}`)
	if w := f.job(j.ID).Webhook; w == nil || w.URL != "https://hooks.example.com/done?x=1" || w.State != job.WebhookPending || w.Attempts != 0 {
		t.Fatalf("webhook %+v", w)
	}
	if j := f.submit(acmeKey, `{"kind": "echo"}`); f.job(j.ID).Webhook != nil {
		t.Fatal("a job without a webhook shows one")
	}
}

// A webhook outside the allow-list, of a tenant without a secret, of the
// wrong shape, or on an API with no allow-list at all is a 400 naming the
// field, and writes nothing.
func TestSubmitRefusesWebhooksItMayNotCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withWebhooks)
	bare := newFixture(t) // no LEASEHOLD_WEBHOOK_ALLOW
	before := f.written()
	for _, c := range []struct {
		f          *fixture
		key, body  string
		field, why string
	}{
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": "https://evil.example.com/"}}`, "webhook.url", "LEASEHOLD_WEBHOOK_ALLOW"},
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": "https://hooks.example.com.evil.net/"}}`, "webhook.url", "LEASEHOLD_WEBHOOK_ALLOW"},
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": "https://user@hooks.example.com/"}}`, "webhook.url", "LEASEHOLD_WEBHOOK_ALLOW"},
		{f, globexKey, `{"kind": "echo", "webhook": {"url": "https://hooks.example.com/"}}`, "webhook.url", "LEASEHOLD_WEBHOOK_SECRETS"},
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": "ftp://hooks.example.com/"}}`, "webhook.url", "http"},
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": "https://hooks.example.com/` + strings.Repeat("a", 2100) + `"}}`, "webhook.url", "longer"},
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": "https://hooks.example.com/", "secret": "x"}}`, "webhook", "unknown"},
		{f, acmeKey, `{"kind": "echo", "webhook": {}}`, "webhook", "url is missing"},
		{f, acmeKey, `{"kind": "echo", "webhook": "https://hooks.example.com/"}`, "webhook", ""},
		{f, acmeKey, `{"kind": "echo", "webhook": {"url": 7}}`, "webhook", ""},
		{bare, acmeKey, `{"kind": "echo", "webhook": {"url": "http://127.0.0.1:9/"}}`, "webhook.url", "LEASEHOLD_WEBHOOK_ALLOW"},
	} {
		resp := c.f.do(request{method: http.MethodPost, path: "/v1/jobs", key: c.key, body: c.body})
		p := expectProblem(t, resp, http.StatusBadRequest, c.field)
		if !strings.Contains(string(resp.body), c.why) {
			t.Errorf("%s: problem %+v does not say %q", c.body, p, c.why)
		}
	}
	if after := f.written(); len(after) != len(before) {
		t.Fatalf("refused submissions wrote %d keys", len(after)-len(before))
	}
}

// A schedule's job is checked the same way, and carries its webhook to the
// jobs it fires.
func TestScheduleJobWebhookIsCheckedAndKept(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withWebhooks)
	resp := f.do(request{method: http.MethodPost, path: "/v1/schedules", key: acmeKey,
		body: `{"name": "n", "cron": "@hourly", "job": {"kind": "echo", "webhook": {"url": "https://evil.example.com/"}}}`})
	expectProblem(t, resp, http.StatusBadRequest, "job.webhook.url")
	resp = f.do(request{method: http.MethodPost, path: "/v1/schedules", key: acmeKey,
		body: `{"name": "n", "cron": "@hourly", "job": {"kind": "echo", "webhook": {"url": "https://hooks.example.com/s"}}}`})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%s: %s", resp.Status, resp.body)
	}
	resp = f.do(request{method: http.MethodPost, path: "/v1/schedules/n/trigger", key: acmeKey})
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("trigger: %s: %s", resp.Status, resp.body)
	}
	j := decode[job.Job](t, resp)
	if w := f.job(j.ID).Webhook; w == nil || w.URL != "https://hooks.example.com/s" {
		t.Fatalf("the fired job's webhook is %+v", w)
	}
}
