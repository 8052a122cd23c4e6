package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/lease"
)

type limitList struct {
	Limits     []job.Limit `json:"limits"`
	NextCursor *string     `json:"next_cursor"`
}

func (f *fixture) limits(key string) []job.Limit {
	f.t.Helper()
	resp := f.get(key, "/v1/limits")
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("list limits: %s %s", resp.Status, resp.body)
	}
	return decode[limitList](f.t, resp).Limits
}

func (f *fixture) putLimit(key, limitKey, body string) response {
	f.t.Helper()
	return f.do(request{method: http.MethodPut, path: "/v1/limits/" + limitKey, key: key, body: body})
}

func TestLimitsEmpty(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.get(acmeKey, "/v1/limits")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(resp.body)) != `{"limits":[],"next_cursor":null}` {
		t.Fatalf("%s %s", resp.Status, resp.body)
	}
	if resp := f.get("", "/v1/limits"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous: %s", resp.Status)
	}
}

func TestLimitsSetListDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	resp := f.putLimit(adminKey, "model:gpt-4o", `{"limit": 200}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %s %s", resp.Status, resp.body)
	}
	if got := decode[job.Limit](t, resp); got != (job.Limit{Key: "model:gpt-4o", Limit: job.Some(200)}) {
		t.Errorf("put answered %+v", got)
	}
	// A wildcard, with '*' escaped.
	if resp := f.putLimit(adminKey, "tenant:%2A", `{"limit": 10}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("put wildcard: %s %s", resp.Status, resp.body)
	}

	// A live lease in one queue and an expired one in another.
	now, err := f.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	space := keys.New(f.prefix)
	f.rdb.SAdd(ctx, space.Queues(), "default", "batch")
	f.rdb.ZAdd(ctx, space.LeaseSet("model:gpt-4o"), redis.Z{Score: float64(now.UnixMilli() + 60_000), Member: "j1"})
	f.rdb.ZAdd(ctx, space.LeaseSet("model:gpt-4o"), redis.Z{Score: float64(now.UnixMilli() - 60_000), Member: "j2"})

	want := []job.Limit{{Key: "model:gpt-4o", Limit: job.Some(200), InUse: 1}, {Key: "tenant:*", Limit: job.Some(10)}}
	if got := f.limits(acmeKey); !slices.Equal(got, want) {
		t.Errorf("acme lists %+v, want %+v", got, want)
	}
	// Setting again answers the in_use too.
	if got := decode[job.Limit](t, f.putLimit(adminKey, "model:gpt-4o", `{"limit": 0}`)); got != (job.Limit{Key: "model:gpt-4o", Limit: job.Some(0), InUse: 1}) {
		t.Errorf("lowered put answered %+v", got)
	}

	resp = f.do(request{method: http.MethodDelete, path: "/v1/limits/model:gpt-4o", key: adminKey})
	if resp.StatusCode != http.StatusNoContent || len(resp.body) != 0 {
		t.Fatalf("delete: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.do(request{method: http.MethodDelete, path: "/v1/limits/model:gpt-4o", key: adminKey}), http.StatusNotFound, "")
	if resp := f.do(request{method: http.MethodDelete, path: "/v1/limits/tenant:*", key: adminKey}); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete wildcard: %s %s", resp.Status, resp.body)
	}
	if got := f.limits(adminKey); len(got) != 0 {
		t.Errorf("after delete: %+v", got)
	}
}

// A key may contain '/': the rest of the path is the key. The document
// cannot describe a multi-segment parameter, so this goes around the
// validating client.
func TestLimitKeyWithSlash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	req := f.newRequest(request{method: http.MethodPut, path: "/v1/limits/org/team:x", key: adminKey, body: `{"limit": 3}`})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"key":"org/team:x"`) {
		t.Fatalf("%s %s", resp.Status, body)
	}
	if got := f.limits(acmeKey); len(got) != 1 || got[0].Key != "org/team:x" {
		t.Errorf("listed %+v", got)
	}
}

func TestLimitsAdminOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if resp := f.putLimit(adminKey, "model:a", `{"limit": 1}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %s %s", resp.Status, resp.body)
	}
	unknown := f.get(acmeKey, "/v1/no/such/path")
	for _, r := range []request{
		{method: http.MethodPut, path: "/v1/limits/model:a", key: acmeKey, body: `{"limit": 5}`},
		{method: http.MethodPut, path: "/v1/limits/model:b", key: globexKey, body: `{"limit": 5}`},
		{method: http.MethodDelete, path: "/v1/limits/model:a", key: acmeKey},
		{method: http.MethodPut, path: "/v1/limits/bad key", key: acmeKey, body: `nonsense`},
	} {
		resp := f.do(r)
		p := expectProblem(t, resp, http.StatusNotFound, "")
		if p.Detail != decode[problemBody](t, unknown).Detail {
			t.Errorf("%s %s as non-admin: %s, unlike an unknown path", r.method, r.path, resp.body)
		}
	}
	if got := f.limits(acmeKey); !slices.Equal(got, []job.Limit{{Key: "model:a", Limit: job.Some(1)}}) {
		t.Errorf("non-admin changed the limits: %+v", got)
	}
}

func TestLimitsBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name, key, body string
		header          http.Header
		status          int
		field           string
	}{
		{name: "negative", key: "model:a", body: `{"limit": -1}`, status: 400, field: "limit"},
		{name: "too large", key: "model:a", body: `{"limit": 1000001}`, status: 400, field: "limit"},
		{name: "fraction", key: "model:a", body: `{"limit": 1.5}`, status: 400, field: "limit"},
		{name: "string", key: "model:a", body: `{"limit": "5"}`, status: 400, field: "limit"},
		{name: "null", key: "model:a", body: `{"limit": null}`, status: 400, field: "limit"},
		{name: "missing", key: "model:a", body: `{}`, status: 400, field: "limit"},
		{name: "unknown field", key: "model:a", body: `{"limit": 1, "max": 2}`, status: 400, field: "max"},
		{name: "per_tenant without a limit", key: "model:a", body: `{"tpm": 100, "per_tenant": 1}`, status: 400, field: "per_tenant"},
		{name: "per_tenant above the limit", key: "model:a", body: `{"limit": 2, "per_tenant": 3}`, status: 400, field: "per_tenant"},
		{name: "per_tenant zero", key: "model:a", body: `{"limit": 2, "per_tenant": 0}`, status: 400, field: "per_tenant"},
		{name: "not an object", key: "model:a", body: `[1]`, status: 400},
		{name: "malformed", key: "model:a", body: `{"limit": `, status: 400},
		{name: "content type", key: "model:a", body: `{"limit": 1}`, header: http.Header{"Content-Type": {"text/plain"}}, status: 415},
		{name: "bad key", key: "model:a%20b", body: `{"limit": 1}`, status: 400, field: "key"},
		{name: "star inside", key: "model:a*", body: `{"limit": 1}`, status: 400, field: "key"},
		{name: "nested wildcard", key: "a:b:*", body: `{"limit": 1}`, status: 400, field: "key"},
		{name: "no key", key: "", body: `{"limit": 1}`, status: 404},
		{name: "too long", key: strings.Repeat("k", 129), body: `{"limit": 1}`, status: 400, field: "key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(request{method: http.MethodPut, path: "/v1/limits/" + tc.key, key: adminKey, body: tc.body, header: tc.header})
			expectProblem(t, resp, tc.status, tc.field)
		})
	}
	expectProblem(t, f.do(request{method: http.MethodDelete, path: "/v1/limits/a*b", key: adminKey}), 400, "key")
	if got := f.limits(adminKey); len(got) != 0 {
		t.Errorf("a refused request wrote %+v", got)
	}
	if w := f.written(); len(w) != 0 {
		t.Errorf("a refused request wrote keys %v", w)
	}
}

func TestLimitsMethods(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.do(request{method: http.MethodPost, path: "/v1/limits", key: adminKey, body: `{}`})
	expectProblem(t, resp, http.StatusMethodNotAllowed, "")
	if got := resp.Header.Get("Allow"); got != "GET" {
		t.Errorf("Allow %q", got)
	}
	resp = f.do(request{method: http.MethodPost, path: "/v1/limits/model:a", key: adminKey, body: `{}`})
	expectProblem(t, resp, http.StatusMethodNotAllowed, "")
	if got := resp.Header.Get("Allow"); got != "DELETE, GET, PATCH, PUT" {
		t.Errorf("Allow %q", got)
	}
	// A GET under /v1/limits/ is a key's history or nothing.
	expectProblem(t, f.get(adminKey, "/v1/limits/model:a"), http.StatusNotFound, "")
}

type limitHistory struct {
	Key     string `json:"key"`
	Minutes []struct {
		At             string `json:"at"`
		EffectiveLimit int64  `json:"effective_limit"`
		Pushbacks      int64  `json:"pushbacks"`
	} `json:"minutes"`
}

// TestLimitHistory: the settlements of an adaptive key (a pushback, then a
// success) show in its history as the minute's effective limit and 429s;
// a key that never adapted has none; another tenant's own key is not
// there, as in GET /v1/limits.
func TestLimitHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if resp := f.putLimit(adminKey, "model:h", `{"limit": 20, "adaptive": true}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %s %s", resp.Status, resp.body)
	}
	leases, err := lease.New(store.New(f.rdb, store.Config{Prefix: f.prefix}), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := job.Budget{Adaptive: true}
	for _, key := range []string{"model:h", "tenant:globex"} {
		g, err := leases.AcquireAll(t.Context(), time.Minute, time.Second, []lease.Ask{{Key: key, Limit: 20, Holders: []string{"a", "b"}, Tokens: []int64{0, 0}, Budget: b}})
		if err != nil || g[0].Tokens[1] == 0 {
			t.Fatalf("acquire %s: %+v %v", key, g, err)
		}
		if _, err := leases.Settle(t.Context(), key, 20, b, []lease.Settlement{
			{Holder: "a", Outcome: lease.OutcomePushback, Tokens: -1},
			{Holder: "b", Outcome: lease.OutcomeOK, Tokens: -1},
		}); err != nil {
			t.Fatal(err)
		}
	}

	resp := f.get(acmeKey, "/v1/limits/model:h/history")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s", resp.Status, resp.body)
	}
	h := decode[limitHistory](t, resp)
	if h.Key != "model:h" || len(h.Minutes) != 1 || h.Minutes[0].EffectiveLimit != 1 || h.Minutes[0].Pushbacks != 1 {
		t.Fatalf("history %s: want one minute, effective 1 after 1 pushback", resp.body)
	}
	at, err := time.Parse(time.RFC3339, h.Minutes[0].At)
	if err != nil || at.Second() != 0 || time.Since(at) > 2*time.Minute || !strings.HasSuffix(h.Minutes[0].At, ".000Z") {
		t.Errorf("minute at %q: want this minute's start, RFC 3339 with ms", h.Minutes[0].At)
	}

	resp = f.get(acmeKey, "/v1/limits/model:never/history")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(resp.body)) != `{"key":"model:never","minutes":[]}` {
		t.Errorf("history of a key that never adapted: %s %s", resp.Status, resp.body)
	}
	expectProblem(t, f.get(acmeKey, "/v1/limits/tenant:globex/history"), http.StatusNotFound, "")
	for _, k := range []string{globexKey, adminKey} {
		if resp := f.get(k, "/v1/limits/tenant:globex/history"); resp.StatusCode != http.StatusOK || !strings.Contains(string(resp.body), `"pushbacks":1`) {
			t.Errorf("tenant:globex's history as %s: %s %s", k, resp.Status, resp.body)
		}
	}
	expectProblem(t, f.get(acmeKey, "/v1/limits/bad%20key/history"), http.StatusBadRequest, "key")
}

// per_tenant is set and read back with the limit it is a share of.
func TestLimitPerTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	resp := f.putLimit(adminKey, "model:shared", `{"limit": 4, "rpm": 100, "per_tenant": 2}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %s %s", resp.Status, resp.body)
	}
	want := job.Limit{Key: "model:shared", Limit: job.Some(4), RPM: job.Some(100), RequestsLastMinute: job.Some(0), PerTenant: job.Some(2)}
	if got := decode[job.Limit](t, resp); got != want {
		t.Errorf("put answered %+v, want %+v", got, want)
	}
	if got := f.limits(acmeKey); !slices.Equal(got, []job.Limit{want}) {
		t.Errorf("acme lists %+v, want %+v", got, want)
	}
}

// configured is what a key's listing shows of its configuration.
func configured(l job.Limit) string {
	return fmt.Sprintf("limit %s rpm %s tpm %s adaptive %v per_tenant %s", opt(l.Limit), opt(l.RPM), opt(l.TPM), l.Adaptive, opt(l.PerTenant))
}

func opt(o job.Optional) string {
	if !o.Set {
		return "-"
	}
	return fmt.Sprint(o.Value)
}

// PATCH /v1/limits/{key} is a JSON merge patch: a field given replaces the
// key's, null removes it, a field left out stays; a patch refused, or one
// that would leave nothing, changes nothing. PUT replaces the whole
// configuration.
//
// Fails when a PATCH drops the fields it leaves out (as a PUT does).
func TestLimitPatchMerges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const path = "/v1/limits/model:m"
	patch := func(body string) response {
		t.Helper()
		return f.do(request{method: http.MethodPatch, path: path, key: adminKey, body: body})
	}
	current := func() string {
		t.Helper()
		for _, l := range f.limits(adminKey) {
			if l.Key == "model:m" {
				return configured(l)
			}
		}
		return "none"
	}
	step := func(body, want string) {
		t.Helper()
		resp := patch(body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH %s: %s %s", body, resp.Status, resp.body)
		}
		if got := configured(decode[job.Limit](t, resp)); got != want {
			t.Fatalf("PATCH %s answered %s, want %s", body, got, want)
		}
		if got := current(); got != want {
			t.Fatalf("after PATCH %s the key lists %s, want %s", body, got, want)
		}
	}
	step(`{"tpm": 1000}`, "limit - rpm - tpm 1000 adaptive false per_tenant -") // from nothing
	if resp := f.putLimit(adminKey, "model:m", `{"limit": 10, "rpm": 100, "tpm": 1000, "adaptive": true, "per_tenant": 5}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %s %s", resp.Status, resp.body)
	}
	step(`{"limit": 20}`, "limit 20 rpm 100 tpm 1000 adaptive true per_tenant 5")
	step(`{"tpm": null, "adaptive": false, "rpm": 200}`, "limit 20 rpm 200 tpm - adaptive false per_tenant 5")
	step(`{"adaptive": true, "per_tenant": null}`, "limit 20 rpm 200 tpm - adaptive true per_tenant -")
	step(`{"adaptive": null}`, "limit 20 rpm 200 tpm - adaptive false per_tenant -")

	for _, tc := range []struct{ body, field string }{
		{`{"limit": null, "rpm": null}`, "limit"}, // nothing would be left
		{`{"per_tenant": 21}`, "per_tenant"},      // above the limit
		{`{"limit": null, "per_tenant": 2}`, "per_tenant"},
		{`{"rpm": 0}`, "rpm"},
		{`{"limit": -1}`, "limit"},
		{`{"limit": "5"}`, "limit"},
		{`{"max": 2}`, "max"},
		{`{}`, "limit"},
	} {
		expectProblem(t, patch(tc.body), http.StatusBadRequest, tc.field)
		if got := current(); got != "limit 20 rpm 200 tpm - adaptive false per_tenant -" {
			t.Fatalf("refused PATCH %s changed the key to %s", tc.body, got)
		}
	}
	expectProblem(t, f.do(request{method: http.MethodPatch, path: path, key: acmeKey, body: `{"limit": 1}`}), http.StatusNotFound, "")
	expectProblem(t, f.do(request{method: http.MethodPatch, path: "/v1/limits/a*b", key: adminKey, body: `{"limit": 1}`}), http.StatusBadRequest, "key")

	// PUT replaces: what it leaves out is removed.
	if resp := f.putLimit(adminKey, "model:m", `{"limit": 7}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %s %s", resp.Status, resp.body)
	}
	if got := current(); got != "limit 7 rpm - tpm - adaptive false per_tenant -" {
		t.Fatalf("after PUT the key lists %s, want the limit alone", got)
	}
}

// GET /v1/limits answers a page at a time (limit 1-500, default 50), by
// key: walking next_cursor lists every key the caller may see exactly
// once, in pages full of them; a bad limit or cursor is a 400.
//
// Fails when the listing answers every key at once.
func TestLimitsListIsPaged(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var want []string
	for i := range 60 {
		key := fmt.Sprintf("model:k%02d", i)
		if resp := f.putLimit(adminKey, key, `{"limit": 1}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("put %s: %s %s", key, resp.Status, resp.body)
		}
		want = append(want, key)
	}
	for _, key := range []string{"tenant:acme", "tenant:globex"} {
		if resp := f.putLimit(adminKey, key, `{"limit": 1}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("put %s: %s %s", key, resp.Status, resp.body)
		}
	}
	// walk follows next_cursor from the first page, asked with q.
	walk := func(key string, q url.Values) (keys []string, sizes []int) {
		t.Helper()
		for {
			resp := f.get(key, "/v1/limits?"+q.Encode())
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /v1/limits?%s: %s %s", q.Encode(), resp.Status, resp.body)
			}
			page := decode[limitList](t, resp)
			sizes = append(sizes, len(page.Limits))
			for _, l := range page.Limits {
				keys = append(keys, l.Key)
			}
			if page.NextCursor == nil {
				return keys, sizes
			}
			q.Set("cursor", *page.NextCursor)
		}
	}
	// acme sees its own key and not globex's, and its pages are full.
	keys, sizes := walk(acmeKey, url.Values{})
	if !slices.Equal(keys, append(slices.Clone(want), "tenant:acme")) || !slices.Equal(sizes, []int{50, 11}) {
		t.Fatalf("acme's pages (default limit): sizes %v, keys %v", sizes, keys)
	}
	keys, sizes = walk(adminKey, url.Values{"limit": {"25"}})
	if !slices.Equal(keys, append(slices.Clone(want), "tenant:acme", "tenant:globex")) || !slices.Equal(sizes, []int{25, 25, 12}) {
		t.Fatalf("the admin's pages of 25: sizes %v, keys %v", sizes, keys)
	}
	for _, c := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=501", "limit"}, {"limit=x", "limit"}, {"cursor=%25%25", "cursor"},
	} {
		expectProblem(t, f.get(adminKey, "/v1/limits?"+c.query), http.StatusBadRequest, c.field)
	}
}
