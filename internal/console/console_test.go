package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/lease"
	"github.com/leasehold/leasehold/webhook"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

const (
	acmeKey  = "acme-key-0123456789"
	betaKey  = "beta-key-0123456789"
	adminKey = "admin-key-0123456789"
	hostile  = `<img src=x onerror=alert(1)>`

	// stepsTimeout bounds each run of browser steps: generous, for a
	// loaded machine; a step that passes returns as soon as it holds.
	stepsTimeout = 20 * time.Second
)

// stack is one test's Leasehold: the real API on a real Redis and NATS,
// with a worker serving the built-in kinds, llm.chat against the fake
// upstream.
type stack struct {
	t      *testing.T
	url    string
	api    *httptest.Server
	rdb    redis.UniversalClient
	prefix string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	prefix := testenv.Prefix(t)
	subject := "test.cancel." + strings.NewReplacer(":", ".").Replace(strings.TrimSuffix(prefix, ":"))
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb := testenv.Redis(t).Client(t)
	nc := testenv.NATS(t).Conn(t)

	store := store.New(rdb, store.Config{Prefix: prefix})
	flags, err := cancel.New(store, nc, cancel.Config{Subject: subject, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := httpapi.ParseKeys("acme:" + acmeKey + ",beta:" + betaKey + ",admin:" + adminKey)
	if err != nil {
		t.Fatal(err)
	}
	// Webhooks to loopback receivers, delivered by a drainer of the stack.
	hooks := webhook.Policy{Allow: kinds.NotifyAllow{Loopback: true}, Secrets: webhook.Secrets{"acme": {[]byte("0123456789abcdef")}}}
	api, err := httpapi.New(httpapi.Config{Redis: rdb, Store: store, Flags: flags, NATS: nc, Prefix: prefix, Keys: keys, Logger: log, Webhooks: hooks,
		Queues: []string{job.DefaultQueue, "bulk"}}) // no worker serves "bulk": its jobs stay queued
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)

	llm := fakellm.New(fakellm.Config{Delay: 20 * time.Millisecond})
	upstream := httptest.NewServer(llm)
	t.Cleanup(upstream.Close)
	t.Cleanup(llm.Close) // first: ends the streams the server waits for

	w, err := execution.NewWorker(rdb, execution.Config{
		Prefix: prefix, Heartbeat: 200 * time.Millisecond, LeaseTTL: 3 * time.Second,
		Poll: 50 * time.Millisecond, ShutdownGrace: time.Second,
		NATS: nc, CancelSubject: subject, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds.Register(w, kinds.SleepConfig{}, kinds.LLMConfig{BaseURL: upstream.URL})
	drainer, err := webhook.New(rdb, webhook.Config{Prefix: prefix, Queues: []string{job.DefaultQueue}, Policy: hooks,
		Backoff: 200 * time.Millisecond, Poll: 50 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- w.Run(ctx) }()
	go func() { done <- drainer.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		}
	})
	return &stack{t: t, url: ts.URL, api: ts, rdb: rdb, prefix: prefix}
}

// call sends a request to the API as key's tenant and decodes its JSON
// answer into out (when not nil), failing the test on any status but want.
func (s *stack) call(method, path, key, body string, want int, out any) {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

func (s *stack) submit(body string) job.Job {
	s.t.Helper()
	var j job.Job
	s.call(http.MethodPost, "/v1/jobs", acmeKey, body, http.StatusCreated, &j)
	return j
}

// await waits, on the API, until job id is terminal and returns it.
func (s *stack) await(id string) job.Job {
	s.t.Helper()
	var j job.Job
	for range 10 {
		s.call(http.MethodGet, "/v1/jobs/"+id+"?wait=5s", acmeKey, "", http.StatusOK, &j)
		if j.State.Terminal() {
			return j
		}
	}
	s.t.Fatalf("job %s did not end: %s", id, j.State)
	return j
}

// tab is the console in a headless Chromium: the browser's one page. It
// counts the dialogs that opened (none may: the console never calls alert
// or confirm, and tenant data that ran as script would), and fails the
// test on exceptions thrown by the console's scripts and on
// Content-Security-Policy violations. One tab serves every test: a
// browser, and each tab of it, takes seconds to start on a loaded machine.
type tab struct {
	t       *testing.T
	ctx     context.Context
	dialogs *atomic.Int32
}

// in returns the tab for subtest t to use: its failures are t's.
func (tb *tab) in(t *testing.T) *tab {
	c := *tb
	c.t = t
	return &c
}

// recordViolations runs in every document before its own scripts.
const recordViolations = `window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));`

// newTab starts Chromium, with the flags of a quiet, sandbox-less headless
// browser and a fresh profile, and returns its page, 1280 × 900 px.
func newTab(t *testing.T) *tab {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found: apt-get update && apt-get install -y chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, stopBrowser := chromedp.NewContext(actx)
	tb := &tab{t: t, ctx: ctx, dialogs: new(atomic.Int32)}
	t.Cleanup(func() {
		stopBrowser()
		stopAlloc()
	})
	err = chromedp.Listen(ctx, func(ev any) { // starts the browser
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			tb.dialogs.Add(1)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{}) //nolint:errcheck // the count fails the test
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			t.Errorf("script error at %s:%d: %s", d.URL, d.LineNumber+1, msg)
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	tb.run(chromedp.EmulateViewport(1280, 900), chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		_, err := cdp.Call(ctx, target, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: recordViolations})
		return err
	}))
	t.Cleanup(func() { // runs before the browser stops
		ctx, stop := context.WithTimeout(ctx, stepsTimeout)
		defer stop()
		violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__violations || []`))
		if err != nil {
			t.Errorf("read CSP violations: %v", err)
		}
		if len(violations) > 0 {
			t.Errorf("Content-Security-Policy violations: %q", violations)
		}
		if n := tb.dialogs.Load(); n > 0 {
			t.Errorf("%d JavaScript dialogs opened", n)
		}
	})
	return tb
}

// run runs steps in the tab; on failure it shows the page's <main>.
func (tb *tab) run(steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, stop := context.WithTimeout(tb.ctx, stepsTimeout)
	defer stop()
	for i, step := range steps {
		if err := chromedp.Do(ctx, step); err != nil {
			ctx, stop := context.WithTimeout(tb.ctx, time.Second)
			defer stop()
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main')?.outerHTML`))
			tb.t.Fatalf("browser, step %d: %v\n<main>: %s", i+1, err, html)
		}
	}
}

// get runs an action that returns a value in the tab.
func get[T any](tb *tab, a chromedp.Action[T]) T {
	tb.t.Helper()
	ctx, stop := context.WithTimeout(tb.ctx, stepsTimeout)
	defer stop()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.t.Fatalf("browser: %v", err)
	}
	return v
}

// login signs in as tenant with key on the login form, which #/login
// shows also to a tab that is signed in.
func (tb *tab) login(key, tenant string) {
	tb.t.Helper()
	tb.run(
		show("#/login"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SetValue(chromedp.ID("key"), key),
		chromedp.Click(chromedp.CSS(".login button[type=submit]")),
		textIs("#tenant", "tenant: "+tenant),
	)
}

// show opens a view of the console in a signed-in tab, as following a
// link does, but at once: the view is drawn (again, if it is the current
// one) before show returns, so no later step can see the page before.
func show(hash string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`((h) => {
			history.pushState(null, '', h);
			window.dispatchEvent(new HashChangeEvent('hashchange'));
			return true;
		})(%q)`, hash))(ctx, t)
		return err
	})
}

// holdCancelAnswerUntil makes the page's next cancel request hand its
// answer to the page only once the element's text contains want, as a
// slow network would.
func holdCancelAnswerUntil(sel, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`((sel, want) => {
			const fetch = window.fetch;
			const shown = () => (document.querySelector(sel)?.textContent || '').includes(want);
			window.fetch = async (url, opts) => {
				const resp = await fetch(url, opts);
				if (String(url).endsWith('/cancel')) {
					window.fetch = fetch;
					while (!shown()) await new Promise((r) => setTimeout(r, 20));
				}
				return resp;
			};
			return true;
		})(%q, %q)`, sel, want))(ctx, t)
		return err
	})
}

// recordWrites makes the page keep, in window.__writes, each request it
// sends that is not a GET, as "METHOD path body".
func recordWrites() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`(() => {
			window.__writes = [];
			const fetch = window.__fetch || window.fetch;
			window.__fetch = fetch;
			window.fetch = (url, opts = {}) => {
				if ((opts.method || 'GET') !== 'GET') window.__writes.push(opts.method + ' ' + url + ' ' + (opts.body || ''));
				return fetch(url, opts);
			};
			return true;
		})()`)(ctx, t)
		return err
	})
}

// until waits until the JavaScript condition holds.
func until(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](cond, chromedp.WithPollingInterval(20*time.Millisecond))(ctx, t)
		return err
	})
}

// textIs waits until the element's text is want.
func textIs(sel, want string) chromedp.Action[chromedp.Void] {
	return until(fmt.Sprintf(`document.querySelector(%q)?.textContent === %q`, sel, want))
}

// textHas waits until the element's text contains want.
func textHas(sel, want string) chromedp.Action[chromedp.Void] {
	return until(fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').includes(%q)`, sel, want))
}

// The browser tests share one API, worker and browser tab, and run in
// order: the tenant's tests, then the admin's.
func TestConsole(t *testing.T) {
	s := newStack(t)
	tab := newTab(t)

	t.Run("login", func(t *testing.T) {
		tb := tab.in(t)
		tb.run(
			chromedp.Navigate(s.url+"/ui/"),
			chromedp.WaitVisible(chromedp.ID("key")),
			chromedp.SetValue(chromedp.ID("key"), "not-a-key"),
			chromedp.Click(chromedp.CSS(".login button[type=submit]")),
			textHas("[role=alert]", "not known"),
		)
		tb.login(acmeKey, "acme")
		if stored := get(tb, chromedp.Evaluate[string](`sessionStorage.getItem('leasehold.key')`)); stored != acmeKey {
			t.Fatalf("sessionStorage holds %q", stored)
		}
		tb.run(chromedp.WaitVisible(chromedp.ID("queues-title")))
	})

	t.Run("output streams in, and cancel stops the job", func(t *testing.T) {
		j := s.submit(`{"kind": "llm.chat", "input": {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}}`)
		tb := tab.in(t)
		tb.run(
			show("#/jobs/"+j.ID),
			textHas("#output", "token-3 "),
			textHas("#stream-status", "following live"),
			// The worker can stop the job before the cancel's answer (the
			// job as it was: running, cancel requested) reaches the page.
			// Here the answer is held until the stream has shown the end,
			// and must not undo it.
			holdCancelAnswerUntil("#state", "cancelled"),
			chromedp.Click(chromedp.ID("cancel")),
			textHas("[role=status]", "Cancel requested"),
			textIs("#stream-status", "ended"),
		)
		if state := get(tb, chromedp.Evaluate[string](`document.querySelector('#state').textContent`)); state != "cancelled" {
			t.Fatalf("after the cancel's answer the page shows %q, want cancelled", state)
		}
		if got := s.await(j.ID); got.State != job.StateCancelled {
			t.Fatalf("job ended %s", got.State)
		}
	})

	t.Run("a webhook's tries are listed", func(t *testing.T) {
		var tries atomic.Int32
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if tries.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		defer rc.Close()
		j := s.submit(`{"kind": "echo", "webhook": {"url": "` + rc.URL + `/hook"}}`)
		tb := tab.in(t)
		tb.run(
			show("#/jobs/"+j.ID),
			textHas("#webhook", "delivered"),
			until(`document.querySelectorAll('#webhook tbody tr').length === 2`),
			textHas("#webhook tbody tr:first-child", "503"),
			textHas("#webhook tbody tr:last-child", "200"),
			textHas("#webhook", "2 tries"),
		)
	})

	t.Run("a waiting job shows its wait and is signalled from its page", func(t *testing.T) {
		j := s.submit(`{"kind": "sleep", "input": {"duration": "10ms", "tick": "100ms", "wait_for": "approval"}}`)
		tb := tab.in(t)
		tb.run(
			show("#/jobs/"+j.ID),
			textHas("#state", "waiting"),
			textHas("#waiting-for", "approval"),
			chromedp.SetValue(chromedp.ID("signal-data"), `{"ok": true}`),
			chromedp.Click(chromedp.ID("send-signal")),
			textHas("[role=status]", "Signal sent"),
			textHas("#state", "succeeded"),
			textIs("#result", "{\n  \"signal\": {\n    \"ok\": true\n  },\n  \"timed_out\": false\n}"),
		)
		if hidden := get(tb, chromedp.Evaluate[bool](`document.querySelector('#signal').hidden`)); !hidden {
			t.Fatal("the signal form stays after the job ended")
		}
	})

	t.Run("hostile content is text", func(t *testing.T) {
		j := s.submit(`{"kind": "echo", "input": "` + hostile + `", "metadata": {"note": "` + hostile + `"}}`)
		s.await(j.ID)
		tb := tab.in(t)
		tb.run(
			show("#/jobs/"+j.ID),
			textIs("#result", `"`+hostile+`"`),
			textIs("#input", `"`+hostile+`"`),
			textHas(".fields", hostile),
		)
		if images := get(tb, chromedp.Evaluate[int](`document.querySelectorAll('img').length`)); images != 0 {
			t.Fatalf("%d img elements on the page", images)
		}
	})

	t.Run("a failed job is retried from its page", func(t *testing.T) {
		// A retried job's attempt numbers go on from the last one spent,
		// so this job, which fails its first attempt, succeeds on its
		// second: the page shows two runs, attempts 1 and 2, the second
		// with a higher fencing token, and "2 of 2".
		j := s.submit(`{"kind": "sleep", "max_attempts": 1, "input": {"duration": "10ms", "tick": "100ms", "fail_attempts": 1}}`)
		failed := s.await(j.ID)
		if failed.State != job.StateFailed {
			t.Fatalf("job ended %s, want failed", failed.State)
		}
		tb := tab.in(t)
		tb.run(
			show("#/jobs/"+j.ID),
			textHas("#state", "failed"),
			textHas("#attempts", "handler_error"),
			chromedp.Click(chromedp.ID("retry")),
			textHas("[role=status]", "Queued again."),
			until(`document.querySelectorAll('#attempts tbody tr').length === 2`),
			textHas("#state", "succeeded"),
			textIs("#stream-status", "ended"),
			until(`[...document.querySelectorAll('#attempts tbody tr td:first-child')].map(td => td.textContent).join() === '1,2'`),
			until(`[...document.querySelectorAll('dd')].some(dd => dd.textContent === '2 of 2' && dd.previousElementSibling.textContent === 'Attempts spent of allowed')`),
		)
		again := s.await(j.ID)
		if again.Execution == nil || again.Execution.FencingToken <= failed.Execution.FencingToken {
			t.Fatalf("retried execution %+v, first %+v", again.Execution, failed.Execution)
		}
		token := get(tb, chromedp.Evaluate[string](`document.querySelector('#attempts tbody tr:last-child td:nth-child(3)').textContent`))
		if token != fmt.Sprint(again.Execution.FencingToken) {
			t.Fatalf("the page shows token %s for the second run, the API %d", token, again.Execution.FencingToken)
		}
		// Opened afresh, the page replays both runs: the first failure is
		// not the end of the stream.
		tb.run(
			show("#/jobs/"+j.ID),
			textIs("#stream-status", "ended"),
			until(`document.querySelectorAll('#attempts tbody tr').length === 2`),
		)
	})

	t.Run("an ended job is deleted from its page", func(t *testing.T) {
		j := s.submit(`{"kind": "echo", "input": {"x": 1}}`)
		s.await(j.ID)
		tb := tab.in(t)
		tb.run(
			show("#/jobs/"+j.ID),
			textIs("#stream-status", "ended"),
			chromedp.Click(chromedp.ID("delete")),
			textIs("#delete", "Click again to delete"),
			chromedp.Click(chromedp.ID("delete")),
			until(`location.hash === '#/jobs'`),
		)
		s.call(http.MethodGet, "/v1/jobs/"+j.ID, acmeKey, "", http.StatusNotFound, nil)
	})

	t.Run("a dropped stream resumes after the last event", func(t *testing.T) {
		j := s.submit(`{"kind": "llm.chat", "input": {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}}`)
		t.Cleanup(func() { s.call(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", acmeKey, "", http.StatusAccepted, nil) })
		tb := tab.in(t)
		tb.run(show("#/jobs/"+j.ID), textHas("#output", "token-3 "))
		s.api.CloseClientConnections()
		tb.run(textHas("#stream-status", "reconnecting"), textHas("#stream-status", "following live"))
		out := get(tb, chromedp.Evaluate[string](`document.querySelector('#output').textContent`))
		n := strings.Count(out, " ")
		tb.run(until(fmt.Sprintf(`document.querySelector('#output').textContent.split(' ').length > %d`, n+5)))
		out = get(tb, chromedp.Evaluate[string](`document.querySelector('#output').textContent`))
		for i, tok := range strings.Fields(out) {
			if tok != fmt.Sprintf("token-%d", i+1) {
				t.Fatalf("output after the reconnect is not one unbroken run: token %d is %q in %q", i+1, tok, out)
			}
		}
	})

	t.Run("the jobs list follows changes and acts on the jobs selected", func(t *testing.T) {
		// No worker serves the queue "bulk": its jobs stay queued until
		// the page acts on them.
		var ids []string
		for range 3 {
			ids = append(ids, s.submit(`{"kind": "echo", "queue": "bulk"}`).ID)
		}
		row := func(id string) string { return fmt.Sprintf(`#main tr[data-id=%q]`, id) }
		tb := tab.in(t)
		tb.run(
			show("#/jobs?queue=bulk"),
			until(`document.querySelectorAll('#main tbody tr').length === 3`),
		)
		// Changes made elsewhere show up without a reload.
		ids = append(ids, s.submit(`{"kind": "echo", "queue": "bulk"}`).ID)
		s.call(http.MethodPost, "/v1/jobs/"+ids[0]+"/cancel", acmeKey, "", http.StatusAccepted, nil)
		tb.run(
			chromedp.WaitVisible(chromedp.CSS(row(ids[3]))),
			textHas(row(ids[0]), "cancelled"),
			// Selecting a job keeps the focus on its box.
			chromedp.Click(chromedp.CSS(row(ids[1])+` input[type=checkbox]`)),
			textIs("#selected-count", "1 selected"),
			until(`document.activeElement === document.querySelector('`+row(ids[1])+` input[type=checkbox]')`),
			// One retried, three refused: each job's outcome is listed.
			chromedp.Click(chromedp.ID("select-all")),
			textIs("#selected-count", "4 selected"),
			chromedp.Click(chromedp.ID("retry-selected")),
			textHas("#bulk-summary", "Retry: 1 of 4 jobs done, 3 refused."),
			textHas(fmt.Sprintf(`#bulk-summary li[data-id=%q]`, ids[0]), "queued again"),
			textHas(fmt.Sprintf(`#bulk-summary li[data-id=%q]`, ids[1]), "refused: "),
			until(`document.querySelectorAll('#main tbody .state-queued').length === 4`),
			chromedp.Click(chromedp.ID("cancel-selected")),
			textHas("#bulk-summary", "Cancel: 4 of 4 jobs done."),
			until(`document.querySelectorAll('#main tbody .state-cancelled').length === 4`),
			// Deleting takes a second click.
			chromedp.Click(chromedp.ID("delete-selected")),
			textIs("#delete-selected", "Click again to delete 4"),
			chromedp.Click(chromedp.ID("delete-selected")),
			textHas("#bulk-summary", "Delete: 4 of 4 jobs done."),
			textHas("#main", "No job matches."),
			textIs("#selected-count", "0 selected"),
		)
		for _, id := range ids {
			s.call(http.MethodGet, "/v1/jobs/"+id, acmeKey, "", http.StatusNotFound, nil)
		}
	})

	t.Run("usage is a chart per day", func(t *testing.T) {
		tb := tab.in(t)
		tb.run(
			show("#/usage"),
			chromedp.WaitVisible(chromedp.CSS(`svg.chart[aria-label^="jobs_submitted per day for acme"]`)),
		)
		if bars := get(tb, chromedp.Evaluate[int](`document.querySelectorAll('svg.chart rect').length`)); bars < 1 {
			t.Fatalf("%d bars in the usage chart", bars)
		}
	})

	t.Run("schedules: next and last run, pause, resume, trigger, delete", func(t *testing.T) {
		s.call(http.MethodPost, "/v1/schedules", acmeKey, `{"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"kind": "echo"}}`, http.StatusCreated, nil)
		tb := tab.in(t)
		tb.run(
			show("#/schedules"),
			textHas("main table", "nightly"),
			textHas("main table", "0 3 * * * (Europe/Berlin)"),
			chromedp.Click(chromedp.CSS(`button[aria-label="Pause schedule nightly"]`)),
			textHas("#schedules-status", "Schedule nightly paused."),
			chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Resume schedule nightly"]`)),
			textHas("main table", "paused"),
			chromedp.Click(chromedp.CSS(`button[aria-label="Trigger schedule nightly"]`)),
			textHas("#schedules-status", "Schedule nightly fired job "),
			chromedp.WaitVisible(chromedp.CSS(`main table a[href^="#/jobs/"]`)),
			chromedp.Click(chromedp.CSS(`button[aria-label="Resume schedule nightly"]`)),
			chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Pause schedule nightly"]`)),
		)
		var sch struct {
			Paused    bool    `json:"paused"`
			LastJobID *string `json:"last_job_id"`
		}
		s.call(http.MethodGet, "/v1/schedules/nightly", acmeKey, "", http.StatusOK, &sch)
		if sch.Paused || sch.LastJobID == nil {
			t.Fatalf("after pause, trigger and resume: %+v", sch)
		}
		if href := get(tb, chromedp.Evaluate[string](`document.querySelector('main table a').getAttribute('href')`)); href != "#/jobs/"+*sch.LastJobID {
			t.Fatalf("last job link %q, want the job %s", href, *sch.LastJobID)
		}
		tb.run(
			chromedp.Click(chromedp.CSS(`button[aria-label="Delete schedule nightly"]`)),
			textHas("#schedules-status", "Schedule nightly deleted."),
			chromedp.WaitNotPresent(chromedp.CSS(`button[aria-label="Delete schedule nightly"]`)),
		)
		s.call(http.MethodGet, "/v1/schedules/nightly", acmeKey, "", http.StatusNotFound, nil)
	})

	// schedule is a schedule as the API reads it.
	type schedule struct {
		Cron      string          `json:"cron"`
		Timezone  string          `json:"timezone"`
		Overlap   string          `json:"overlap"`
		LastJobID *string         `json:"last_job_id"`
		Job       json.RawMessage `json:"job"`
	}

	t.Run("a schedule is created in the console", func(t *testing.T) {
		tb := tab.in(t)
		form := func(name string) chromedp.CSS { return chromedp.CSS(`#schedule-form [name=` + name + `]`) }
		tb.run(
			show("#/schedules"),
			chromedp.WaitVisible(form("name")),
			chromedp.SetValue(form("name"), "hourly-sync"),
			chromedp.SetValue(form("cron"), "0 * * * *"),
			chromedp.SetValue(form("timezone"), "Europe/Berlin"),
			chromedp.SetValue(form("kind"), "echo"),
			chromedp.SetValue(form("overlap"), "skip"),
			// Input that is not JSON is refused before anything is sent.
			chromedp.SetValue(form("input"), `{"source": `),
			chromedp.Click(chromedp.CSS(`#schedule-form button[type=submit]`)),
			textIs("#schedules-status", "Not saved: the job input is not JSON."),
			chromedp.SetValue(form("input"), `{"source": "crm"}`),
			chromedp.Click(chromedp.CSS(`#schedule-form button[type=submit]`)),
			textIs("#schedules-status", "Schedule hourly-sync created."),
			textIs(`tr[data-name=hourly-sync] td[data-label=Job]`, `echo{"source":"crm"}`),
			// The next run is shown in the schedule's zone, named.
			textHas(`tr[data-name=hourly-sync] td[data-label="Next run"]`, ":00:00 Europe/Berlin"),
			textIs(`tr[data-name=hourly-sync] td[data-label="Last run"]`, "never"),
		)
		var sch schedule
		s.call(http.MethodGet, "/v1/schedules/hourly-sync", acmeKey, "", http.StatusOK, &sch)
		if sch.Cron != "0 * * * *" || sch.Timezone != "Europe/Berlin" || sch.Overlap != "skip" || !strings.Contains(string(sch.Job), `"input":{"source":"crm"}`) {
			t.Fatalf("the schedule as created: %+v %s", sch, sch.Job)
		}
	})

	t.Run("a schedule is edited in the console and keeps its history", func(t *testing.T) {
		defer s.call(http.MethodDelete, "/v1/schedules/hourly-sync", acmeKey, "", http.StatusNoContent, nil)
		var fired job.Job
		s.call(http.MethodPost, "/v1/schedules/hourly-sync/trigger", acmeKey, "", http.StatusCreated, &fired)
		row := `tr[data-name=hourly-sync]`
		tb := tab.in(t)
		tb.run(
			show("#/schedules"),
			chromedp.WaitVisible(chromedp.CSS(row+` a[href="#/jobs/`+fired.ID+`"]`)),
			textHas(row+` td[data-label="Last run"]`, "Europe/Berlinjob "+fired.ID[:8]),
			chromedp.Click(chromedp.CSS(`button[aria-label="Edit schedule hourly-sync"]`)),
			textIs("#schedule-form-title", "Edit schedule hourly-sync"),
			until(`document.querySelector('#schedule-form [name=name]').readOnly`),
			until(`document.querySelector('#schedule-form [name=cron]').value === '0 * * * *'`),
			chromedp.SetValue(chromedp.CSS(`#schedule-form [name=cron]`), "30 * * * *"),
			chromedp.SetValue(chromedp.CSS(`#schedule-form [name=input]`), `{"source": "erp"}`),
			chromedp.Click(chromedp.CSS(`#schedule-form button[type=submit]`)),
			textIs("#schedules-status", "Schedule hourly-sync saved."),
			textIs(row+` td[data-label=Job]`, `echo{"source":"erp"}`),
			textHas(row+` td[data-label=Cron]`, "30 * * * *"),
			textIs("#schedule-form-title", "New schedule"),
		)
		var sch schedule
		s.call(http.MethodGet, "/v1/schedules/hourly-sync", acmeKey, "", http.StatusOK, &sch)
		if sch.Cron != "30 * * * *" || sch.Overlap != "skip" || !strings.Contains(string(sch.Job), `"input":{"source":"erp"}`) {
			t.Fatalf("the schedule after the edit: %+v %s", sch, sch.Job)
		}
		if sch.LastJobID == nil || *sch.LastJobID != fired.ID {
			t.Fatalf("the edit lost the last job: %v, want %s", sch.LastJobID, fired.ID)
		}
	})

	t.Run("every page of schedules is listed", func(t *testing.T) {
		// One more than the console reads in a page.
		names := make([]string, 501)
		for i := range names {
			names[i] = fmt.Sprintf("paged-%03d", i)
		}
		each := func(f func(name string)) {
			var wg sync.WaitGroup
			for part := range slices.Chunk(names, 64) {
				wg.Go(func() {
					for _, name := range part {
						f(name)
					}
				})
			}
			wg.Wait()
		}
		each(func(name string) {
			s.call(http.MethodPost, "/v1/schedules", acmeKey, `{"name": "`+name+`", "cron": "0 3 * * *", "job": {"kind": "echo"}}`, http.StatusCreated, nil)
		})
		defer each(func(name string) {
			s.call(http.MethodDelete, "/v1/schedules/"+name, acmeKey, "", http.StatusNoContent, nil)
		})
		tb := tab.in(t)
		tb.run(
			show("#/schedules"),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-name=paged-500]`)),
			until(`document.querySelectorAll('main tbody tr').length === 501`),
		)
	})

	t.Run("a tenant sees the workers of its running jobs, with its own counts", func(t *testing.T) {
		// One worker runs a job of acme's and two of beta's at once.
		running := func(key string) job.Job {
			var j job.Job
			s.call(http.MethodPost, "/v1/jobs", key, `{"kind": "sleep", "input": {"duration": "1m", "tick": "1s"}}`, http.StatusCreated, &j)
			testenv.Eventually(t, 10*time.Second, func() bool {
				s.call(http.MethodGet, "/v1/jobs/"+j.ID, key, "", http.StatusOK, &j)
				return j.State == job.StateRunning && j.Execution != nil
			}, "job %s never ran", j.ID)
			t.Cleanup(func() {
				s.call(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", key, "", http.StatusAccepted, nil)
				for !j.State.Terminal() {
					s.call(http.MethodGet, "/v1/jobs/"+j.ID+"?wait=5s", key, "", http.StatusOK, &j)
				}
			})
			return j
		}
		mine := running(acmeKey)
		theirs := running(betaKey)
		running(betaKey)
		var all httpapi.WorkerList
		testenv.Eventually(t, 10*time.Second, func() bool {
			s.call(http.MethodGet, "/v1/workers", adminKey, "", http.StatusOK, &all)
			return len(all.Workers) == 1 && all.Workers[0].Running == 3
		}, "the admin never read one worker running 3 jobs: %+v", &all.Workers)
		row := fmt.Sprintf(`#main tr[data-id=%q]`, mine.Execution.Worker)
		tb := tab.in(t)
		tb.run(
			show("#/workers"),
			chromedp.WaitVisible(chromedp.CSS(row)),
			textIs(row+` td[data-label="Your jobs running"]`, "1"),
			textHas(row+` td[data-label=Kinds]`, "sleep"),
		)
		cells := get(tb, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#main th, #main td')].map((e) => e.textContent)`))
		for _, other := range []string{all.Workers[0].ID, theirs.Execution.Worker} {
			if slices.ContainsFunc(cells, func(text string) bool { return strings.Contains(text, other) }) {
				t.Errorf("the tenant's workers page shows %q, a name not its own: %q", other, cells)
			}
		}
		for _, other := range []string{"Host", all.Workers[0].Host} {
			if slices.Contains(cells, other) {
				t.Errorf("the tenant's workers page shows the host: %q", cells)
			}
		}
		if n := get(tb, chromedp.Evaluate[int](`document.querySelectorAll('#main tbody tr').length`)); n != 1 {
			t.Errorf("the tenant sees %d workers, want the one running its job", n)
		}
	})

	tab.login(adminKey, "admin")

	t.Run("the admin pauses and resumes a queue", func(t *testing.T) {
		s.submit(`{"kind": "echo"}`) // the queue exists once it has had a job
		tb := tab.in(t)
		tb.run(
			show("#/admin"),
			chromedp.Click(chromedp.CSS(`button[aria-label="Pause queue default"]`)),
			chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Resume queue default"]`)),
			textHas("#admin-status", "Queue default paused."),
		)
		type queue struct {
			Name   string `json:"name"`
			Paused bool   `json:"paused"`
		}
		var q struct {
			Queues []queue `json:"queues"`
		}
		s.call(http.MethodGet, "/v1/queues", adminKey, "", http.StatusOK, &q)
		if !slices.Contains(q.Queues, queue{Name: job.DefaultQueue, Paused: true}) {
			t.Fatalf("queues after pause: %+v", q.Queues)
		}
		tb.run(
			chromedp.Click(chromedp.CSS(`button[aria-label="Resume queue default"]`)),
			chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Pause queue default"]`)),
		)
	})

	t.Run("the admin sees the live workers and what they serve", func(t *testing.T) {
		// The admin reads the worker's own name; a tenant would read an
		// opaque one.
		var ran job.Job
		s.call(http.MethodGet, "/v1/jobs/"+s.await(s.submit(`{"kind": "echo"}`).ID).ID, adminKey, "", http.StatusOK, &ran)
		row := fmt.Sprintf(`#main tr[data-id=%q]`, ran.Execution.Worker)
		tb := tab.in(t)
		tb.run(
			show("#/workers"),
			chromedp.WaitVisible(chromedp.CSS(row)),
			textHas(row+` td[data-label=Queues]`, job.DefaultQueue),
			textHas(row+` td[data-label=Kinds]`, "llm.chat"),
			textHas(row+` td[data-label=Kinds]`, "sleep"),
			textHas(row+` td[data-label="Last heartbeat"]`, " s ago)"),
		)
	})

	t.Run("the admin sees finishes per minute and retries in bulk", func(t *testing.T) {
		j := s.submit(`{"kind": "sleep", "max_attempts": 1, "input": {"duration": "10ms", "tick": "100ms", "fail_attempts": 1}}`)
		first := s.await(j.ID)
		tb := tab.in(t)
		tb.run(
			show("#/overview"),
			until(`/^default, last hour: [1-9][0-9]* succeeded, [1-9][0-9]* failed/.test(document.querySelector('svg.chart[aria-label^="default, "]')?.getAttribute('aria-label'))`),
			show("#/admin"),
			chromedp.SetValue(chromedp.CSS(`form[aria-labelledby=bulk-title] input[name=kind]`), "sleep"),
			chromedp.Click(chromedp.CSS(`form[aria-labelledby=bulk-title] button`)),
			until(`/^Bulk retry: [1-9][0-9]* jobs? queued again\.$/.test(document.querySelector('#admin-status').textContent)`),
		)
		if again := s.await(j.ID); again.Execution.FencingToken <= first.Execution.FencingToken {
			t.Fatalf("the bulk retry did not run job %s again", j.ID)
		}
	})

	t.Run("charts are labelled at a readable size, and times name their zone", func(t *testing.T) {
		s.await(s.submit(`{"kind": "echo"}`).ID)
		tb := tab.in(t)
		chart := `document.querySelector('svg.chart[aria-label^="default, "]')`
		tb.run(
			show("#/overview"),
			until(chart+` !== null`),
			textIs(`svg.chart[aria-label^="default, "] .chart-title`, "Queue default"),
		)
		type drawn struct {
			Width, Height float64
			Axes, Ticks   string
		}
		got := get(tb, chromedp.Evaluate[drawn](`((c) => {
			const r = c.getBoundingClientRect();
			return {Width: r.width, Height: r.height,
				Axes: [...c.querySelectorAll('.axis-title')].map((t) => t.textContent).join('|'),
				Ticks: [...c.querySelectorAll('.axis')].map((t) => t.textContent).join('|')};
		})(`+chart+`)`))
		if got.Width < 400 || got.Height < 150 {
			t.Errorf("the finishes chart is %.0f × %.0f px, want at least 400 × 150", got.Width, got.Height)
		}
		if got.Axes != "jobs / min|minute (UTC)" {
			t.Errorf("the axes are titled %q", got.Axes)
		}
		for _, tick := range []string{"succeeded", "failed", "|0|"} {
			if !strings.Contains(got.Ticks, tick) {
				t.Errorf("the chart's legend and axes read %q: no %q", got.Ticks, tick)
			}
		}
		tb.run(
			show("#/jobs"),
			until(`/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/.test(document.querySelector('td[data-label=Created]')?.textContent)`),
		)
	})

	t.Run("the admin sets and removes a limit", func(t *testing.T) {
		tb := tab.in(t)
		tb.run(
			show("#/admin"),
			chromedp.WaitVisible(chromedp.CSS(`form[aria-label="Set a limit"] input[name=key]`)),
			chromedp.SendKeys(chromedp.CSS(`form[aria-label="Set a limit"] input[name=key]`), "model:console"),
			chromedp.SendKeys(chromedp.CSS(`form[aria-label="Set a limit"] input[name=limit]`), "7"),
			chromedp.Click(chromedp.CSS(`form[aria-label="Set a limit"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Remove the limit of model:console"]`)),
		)
		var l struct {
			Limits []job.Limit `json:"limits"`
		}
		s.call(http.MethodGet, "/v1/limits", adminKey, "", http.StatusOK, &l)
		if len(l.Limits) != 1 || l.Limits[0].Key != "model:console" || l.Limits[0].Limit != job.Some(7) {
			t.Fatalf("limits after the form: %+v", l.Limits)
		}
		tb.run(
			show("#/overview"),
			chromedp.WaitVisible(chromedp.CSS(`svg.meter[aria-label^="model:console: 0 of 7 in use"]`)),
			show("#/admin"),
			chromedp.Click(chromedp.CSS(`button[aria-label="Remove the limit of model:console"]`)),
			textHas("#admin-status", "removed"),
			chromedp.WaitNotPresent(chromedp.CSS(`button[aria-label="Remove the limit of model:console"]`)),
		)
	})

	t.Run("editing a limit sends a merge patch and keeps its budgets", func(t *testing.T) {
		s.call(http.MethodPut, "/v1/limits/model:keep", adminKey, `{"limit": 20, "rpm": 3000, "tpm": 400000, "adaptive": true}`, http.StatusOK, nil)
		defer s.call(http.MethodDelete, "/v1/limits/model:keep", adminKey, "", http.StatusNoContent, nil)
		row := `#main tr[data-key="model:keep"]`
		tb := tab.in(t)
		tb.run(
			show("#/admin"),
			chromedp.WaitVisible(chromedp.CSS(row)),
			textHas("#limits-help", "effective limit"),
			textHas(row+` td[data-label="Tokens per minute"]`, "0 in the last minute"),
			textHas(row+` td[data-label=Limit]`, "effective "),
			recordWrites(),
			chromedp.SetValue(chromedp.CSS(`input[aria-label="Limit of model:keep"]`), "30"),
			chromedp.SetValue(chromedp.CSS(`input[aria-label="Requests per minute of model:keep"]`), ""),
			chromedp.Click(chromedp.CSS(`button[aria-label="Save the limit of model:keep"]`)),
			until(`window.__writes.length > 0`),
		)
		if sent := get(tb, chromedp.Evaluate[[]string](`window.__writes`)); !slices.Equal(sent, []string{`PATCH /v1/limits/model%3Akeep {"limit":30,"rpm":null}`}) {
			t.Fatalf("the console sent %q, want one merge patch of the fields changed", sent)
		}
		tb.run(textIs("#admin-status", "Limit of model:keep: limit set to 30, rpm removed."))
		var l struct {
			Limits []job.Limit `json:"limits"`
		}
		s.call(http.MethodGet, "/v1/limits", adminKey, "", http.StatusOK, &l)
		i := slices.IndexFunc(l.Limits, func(x job.Limit) bool { return x.Key == "model:keep" })
		if i < 0 {
			t.Fatalf("model:keep is gone after the edit: %+v", l.Limits)
		}
		if got := l.Limits[i]; got.Limit != job.Some(30) || got.RPM.Set || got.TPM != job.Some(400000) || !got.Adaptive {
			t.Fatalf("model:keep after Save: %+v; want limit 30, no rpm, tpm and adaptive kept", got)
		}
	})

	t.Run("an adaptive key shows its budgets and its hour", func(t *testing.T) {
		s.call(http.MethodPut, "/v1/limits/model:budget", adminKey, `{"limit": 20, "rpm": 3000, "tpm": 400000, "adaptive": true}`, http.StatusOK, nil)
		// Two executions settled as a worker would: one refused (a 429
		// with Retry-After), one served.
		leases, err := lease.New(store.New(s.rdb, store.Config{Prefix: s.prefix}), lease.Config{})
		if err != nil {
			t.Fatal(err)
		}
		b := job.Budget{RPM: 3000, TPM: 400000, Adaptive: true}
		if _, err := leases.AcquireAll(t.Context(), time.Minute, time.Second, []lease.Ask{{Key: "model:budget", Limit: 20, Holders: []string{"a", "b"}, Tokens: []int64{500, 500}, Budget: b}}); err != nil {
			t.Fatal(err)
		}
		if _, err := leases.Settle(t.Context(), "model:budget", 20, b, []lease.Settlement{
			{Holder: "a", Outcome: lease.OutcomePushback, Tokens: -1, Estimate: 500, RetryAfter: time.Minute},
			{Holder: "b", Outcome: lease.OutcomeOK, Tokens: 120, Estimate: 500},
		}); err != nil {
			t.Fatal(err)
		}
		tb := tab.in(t)
		row := `Array.from(document.querySelectorAll('section[aria-labelledby=keys-title] tbody tr')).find((r) => r.cells[0].textContent === 'model:budget')`
		tb.run(
			show("#/overview"),
			until(row+` !== undefined`),
			textHas(`section[aria-labelledby=keys-title] thead`, "Requests / rpm"),
		)
		cells := get(tb, chromedp.Evaluate[[]string](`Array.from(`+row+`.cells).map((c) => c.textContent)`))
		want := map[int]string{3: "1 of 20", 5: "2 / 3000", 6: "620 / 400000", 8: "1 429s, effective 1"}
		for i, w := range want {
			if len(cells) != 9 || !strings.Contains(cells[i], w) {
				t.Fatalf("model:budget's row %q: want %q in column %d", cells, w, i)
			}
		}
		if !strings.HasPrefix(cells[7], time.Now().UTC().Format("2006-01-02")) {
			t.Errorf("throttled until %q, want a time", cells[7])
		}
		chart := `document.querySelector('section[aria-labelledby=hours-title] svg.chart[aria-label^="model:budget, "]')`
		tb.run(until(chart + ` !== null`))
		label := get(tb, chromedp.Evaluate[string](chart+`.getAttribute('aria-label')`))
		if label != "model:budget, last hour: effective limit 1 to 1, 1 last, 1 429s" {
			t.Errorf("the chart reads %q", label)
		}
		if n := get(tb, chromedp.Evaluate[int](chart+`.querySelectorAll('polyline.effective, rect.series-pushbacks:not(.swatch)').length`)); n != 2 {
			t.Errorf("the chart draws %d of the effective limit's line and the 429s' bar, want both", n)
		}
		if os.Getenv("LEASEHOLD_SCREENSHOTS") == "1" {
			for _, w := range []int64{1280, 390} {
				tb.run(chromedp.EmulateViewport(w, 900), show("#/overview"), until(row+` !== undefined`))
				png := get(tb, chromedp.FullScreenshot(100))
				if err := os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("overview-%d.png", w)), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tb.run(chromedp.EmulateViewport(1280, 900))
		}
	})

	t.Run("no page scrolls sideways at 390 px", func(t *testing.T) {
		// Content as long as tenants send it: a failed job with an error
		// and metadata, a schedule with an input, a key with budgets.
		long := strings.Repeat("abcdefghij", 12)
		failed := s.await(s.submit(`{"kind": "sleep", "max_attempts": 1, "input": {"duration": "10ms", "tick": "100ms", "fail_attempts": 1}, "metadata": {"conversation": "` + long + `"}}`).ID)
		s.call(http.MethodPost, "/v1/schedules", adminKey, `{"name": "a-rather-long-schedule-name-for-a-phone", "cron": "*/5 * * * *", "timezone": "America/Argentina/Buenos_Aires", "job": {"kind": "echo", "input": {"note": "`+long+`"}}}`, http.StatusCreated, nil)
		defer s.call(http.MethodDelete, "/v1/schedules/a-rather-long-schedule-name-for-a-phone", adminKey, "", http.StatusNoContent, nil)
		s.call(http.MethodPut, "/v1/limits/model:phone", adminKey, `{"limit": 20, "rpm": 3000, "tpm": 400000, "adaptive": true}`, http.StatusOK, nil)
		defer s.call(http.MethodDelete, "/v1/limits/model:phone", adminKey, "", http.StatusNoContent, nil)

		tb := tab.in(t)
		tb.run(chromedp.EmulateViewport(390, 844))
		defer tb.run(chromedp.EmulateViewport(1280, 900))
		for _, view := range []struct{ hash, ready string }{
			{"#/login", "#key"},
			{"#/overview", "#keys-title + div table, #keys-title ~ p"},
			{"#/jobs", "main tbody tr"},
			{"#/jobs/" + failed.ID, "#attempts tbody tr"},
			{"#/schedules", "main tbody tr"},
			{"#/workers", "main tbody tr, #workers-status.error"},
			{"#/usage", "svg.chart"},
			{"#/admin", "tr[data-key='model:phone']"},
		} {
			tb.run(show(view.hash), chromedp.WaitVisible(chromedp.CSS(view.ready)))
			wide := get(tb, chromedp.Evaluate[[]string](`(() => {
				const page = document.scrollingElement;
				const wide = page.scrollWidth > page.clientWidth ? ['the page: ' + page.scrollWidth + ' px'] : [];
				for (const el of document.querySelectorAll('body *')) {
					if (el.scrollWidth > el.clientWidth + 1 && ['auto', 'scroll'].includes(getComputedStyle(el).overflowX)) {
						wide.push(el.tagName.toLowerCase() + '.' + el.className + ': ' + el.scrollWidth + ' px in ' + el.clientWidth);
					}
				}
				return wide;
			})()`))
			if len(wide) > 0 {
				t.Errorf("%s at 390 px scrolls sideways: %q", view.hash, wide)
			}
		}
	})

	if os.Getenv("LEASEHOLD_SCREENSHOTS") == "1" {
		t.Run("screenshots", func(t *testing.T) { screenshots(tab.in(t), s) })
	}
}

// screenshots writes the console as the README shows it, and the
// manifest of what the images were made from: the admin's overview, a
// job's page at a desktop and a phone width, the jobs list with a
// selection acted on, and the Schedules page.
func screenshots(tb *tab, s *stack) {
	var files []string
	shoot := func(name string, width, height int64, steps ...chromedp.Action[chromedp.Void]) {
		tb.t.Helper()
		tb.run(append([]chromedp.Action[chromedp.Void]{chromedp.EmulateViewport(width, height)}, steps...)...)
		png := get(tb, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join("..", "..", "docs", name), png, 0o644); err != nil {
			tb.t.Fatal(err)
		}
		files = append(files, name)
	}
	shoot("console-overview-1280.png", 1280, 900, show("#/overview"), chromedp.WaitVisible(chromedp.CSS("#hours-title")))

	tb.login(acmeKey, "acme")
	j := s.submit(`{"kind": "llm.chat", "input": {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}, "metadata": {"conversation": "c-1"}}`)
	s.await(j.ID)
	for _, w := range []int64{1280, 390} {
		shoot(fmt.Sprintf("console-%d.png", w), w, 1100, show("#/jobs/"+j.ID), textIs("#stream-status", "ended"))
	}

	for range 3 {
		s.submit(`{"kind": "echo", "queue": "bulk"}`)
	}
	shoot("console-jobs-1280.png", 1280, 600,
		show("#/jobs?queue=bulk"),
		until(`document.querySelectorAll('#main tbody tr').length === 3`),
		chromedp.Click(chromedp.CSS(`#main tbody tr:first-child input[type=checkbox]`)),
		chromedp.Click(chromedp.ID("cancel-selected")),
		textHas("#bulk-summary", "Cancel: 1 of 1 job done."),
		chromedp.Click(chromedp.CSS(`#main tbody tr:last-child input[type=checkbox]`)),
	)

	for _, body := range []string{
		`{"name": "nightly-report", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"kind": "echo", "input": {"report": "daily"}}}`,
		`{"name": "refresh-embeddings", "cron": "@every 15m", "overlap": "skip", "job": {"kind": "echo"}}`,
		`{"name": "weekly-digest", "cron": "30 8 * * MON", "timezone": "America/New_York", "job": {"kind": "echo"}}`,
	} {
		s.call(http.MethodPost, "/v1/schedules", acmeKey, body, http.StatusCreated, nil)
	}
	s.call(http.MethodPost, "/v1/schedules/refresh-embeddings/pause", acmeKey, "", http.StatusOK, nil)
	tb.run(
		show("#/schedules"),
		textHas("main table", "weekly-digest"),
		chromedp.Click(chromedp.CSS(`button[aria-label="Trigger schedule nightly-report"]`)),
	)
	shoot("console-schedules-1280.png", 1280, 600, chromedp.WaitVisible(chromedp.CSS(`main table a[href^="#/jobs/"]`)))
	tb.run(chromedp.EmulateViewport(1280, 900))
	writeManifest(tb.t, files)
}
