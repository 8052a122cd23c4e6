package fencing_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestFromHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		values []string
		want   fencing.Token
		err    error
	}{
		{"missing", nil, 0, fencing.ErrNoToken},
		{"one", []string{"1"}, 1, nil},
		{"largest", []string{"18446744073709551615"}, math.MaxUint64, nil},
		{"empty", []string{""}, 0, fencing.ErrInvalid},
		{"zero", []string{"0"}, 0, fencing.ErrInvalid},
		{"negative", []string{"-5"}, 0, fencing.ErrInvalid},
		{"overflow", []string{"18446744073709551616"}, 0, fencing.ErrInvalid},
		{"not a number", []string{"seven"}, 0, fencing.ErrInvalid},
		{"fraction", []string{"7.5"}, 0, fencing.ErrInvalid},
		{"hex", []string{"0x7"}, 0, fencing.ErrInvalid},
		{"two headers", []string{"7", "8"}, 0, fencing.ErrInvalid},
	} {
		h := http.Header{}
		for _, v := range c.values {
			h.Add(fencing.Header, v)
		}
		got, err := fencing.FromHeader(h)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: FromHeader(%q) = %d, %v; want %d, %v", c.name, c.values, got, err, c.want, c.err)
		}
	}
}

func TestSetHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	fencing.SetHeader(h, 41)
	fencing.SetHeader(h, 42) // replaces: a request carries one token
	if got := h.Values("fencing-token"); len(got) != 1 || got[0] != "42" {
		t.Fatalf("Fencing-Token = %q, want [42]", got)
	}
	if tok, err := fencing.FromHeader(h); tok != 42 || err != nil {
		t.Fatalf("FromHeader = %d, %v; want 42", tok, err)
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	h := fencedHandler(new(fencing.Memory))
	for _, c := range []struct {
		name   string
		path   string
		token  string // "" sends no header
		status int
	}{
		{"missing token", "/jobs/a", "", http.StatusBadRequest},
		{"malformed token", "/jobs/a", "seven", http.StatusBadRequest},
		{"token 0", "/jobs/a", "0", http.StatusBadRequest},
		{"empty resource", "/jobs/", "3", http.StatusBadRequest},
		{"fresh", "/jobs/a", "7", http.StatusOK},
		{"stale", "/jobs/a", "5", http.StatusConflict},
		{"same owner again", "/jobs/a", "7", http.StatusOK},
		{"newer owner", "/jobs/a", "8", http.StatusOK},
		{"old owner back", "/jobs/a", "7", http.StatusConflict},
		{"other resource", "/jobs/b", "1", http.StatusOK},
	} {
		rec := serve(h, c.path, c.token)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d (body %s)", c.name, rec.Code, c.status, rec.Body)
			continue
		}
		if c.status == http.StatusOK {
			if rec.Body.String() != "handled" {
				t.Errorf("%s: body %q, want the handler's", c.name, rec.Body)
			}
			continue
		}
		wantProblem(t, c.name, rec, c.status)
	}
}

func TestMiddlewareWithStore(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			h := fencedHandler(store.New(b.Client, store.Config{Prefix: testenv.Prefix(t)}).Fence())
			for _, c := range []struct {
				token  string
				status int
			}{{"7", http.StatusOK}, {"5", http.StatusConflict}, {"7", http.StatusOK}, {"9", http.StatusOK}, {"8", http.StatusConflict}} {
				if rec := serve(h, "/jobs/a", c.token); rec.Code != c.status {
					t.Fatalf("token %s: status %d, want %d (body %s)", c.token, rec.Code, c.status, rec.Body)
				}
			}
		})
	}
}

// With Redis down the guard cannot tell a fresh token from a stale one: the
// request must be refused as unavailable, never passed through unfenced.
func TestMiddlewareRedisDown(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{
		Addr:          srv.Addr(),
		DialTimeout:   200 * time.Millisecond,
		DialerRetries: 1,
		ReadTimeout:   200 * time.Millisecond,
		WriteTimeout:  200 * time.Millisecond,
		MaxRetries:    -1,
	})
	t.Cleanup(func() { rdb.Close() })
	h := fencedHandler(store.New(rdb, store.Config{Prefix: testenv.Prefix(t)}).Fence())

	if rec := serve(h, "/jobs/a", "3"); rec.Code != http.StatusOK {
		t.Fatalf("with Redis up: status %d, want 200 (body %s)", rec.Code, rec.Body)
	}
	srv.Kill(t)
	rec := serve(h, "/jobs/a", "4")
	wantProblem(t, "Redis down", rec, http.StatusServiceUnavailable)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

// fencedHandler answers "handled" to PUT /jobs/{id} behind Middleware with g.
func fencedHandler(g fencing.Guard) http.Handler {
	mux := http.NewServeMux()
	// {id...} also matches "/jobs/", giving the empty resource name.
	mux.Handle("PUT /jobs/{id...}", fencing.Middleware(g, func(r *http.Request) string { return r.PathValue("id") })(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("handled")) })))
	return mux
}

func serve(h http.Handler, path, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPut, path, nil)
	if token != "" {
		req.Header.Set(fencing.Header, token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// wantProblem checks that rec is an RFC 9457 problem with status.
func wantProblem(t *testing.T, name string, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("%s: status %d, want %d (body %s)", name, rec.Code, status, rec.Body)
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", name, ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", name, rec.Body, err)
		return
	}
	if p.Type != "about:blank" || p.Title != http.StatusText(status) || p.Status != status || p.Detail == "" {
		t.Errorf("%s: problem %+v, want about:blank, %q, %d and a detail", name, p, http.StatusText(status), status)
	}
}
