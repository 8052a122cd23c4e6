package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/console"
)

// The console's files are served at /ui/ (and / leads there) with a strict
// Content-Security-Policy; anything else under /ui/ is the 404 problem of
// an unknown path. (The console is no part of docs/openapi.yaml, so these
// requests bypass the fixture's validating client.)
func TestConsoleFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, f.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	for path, want := range map[string]string{
		"/ui/":          "text/html; charset=utf-8",
		"/ui/app.js":    "text/javascript; charset=utf-8",
		"/ui/style.css": "text/css; charset=utf-8",
	} {
		resp, body := get(http.MethodGet, path)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want || body == "" {
			t.Errorf("GET %s: %s %q, %d bytes; want 200 %q", path, resp.Status, resp.Header.Get("Content-Type"), len(body), want)
		}
		for header, value := range map[string]string{
			"Content-Security-Policy": console.Policy,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Cache-Control":           "no-cache",
		} {
			if got := resp.Header.Get(header); got != value {
				t.Errorf("GET %s: %s is %q, want %q", path, header, got, value)
			}
		}
	}
	if !strings.Contains(console.Policy, "frame-ancestors 'none'") || strings.Contains(console.Policy, "unsafe") {
		t.Errorf("policy %q", console.Policy)
	}

	// The API's address itself, opened in a browser, leads to the console.
	for _, path := range []string{"/ui", "/"} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			if resp, _ := get(method, path); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
				t.Errorf("%s %s: %s to %q, want a redirect to /ui/", method, path, resp.Status, resp.Header.Get("Location"))
			}
		}
	}
	if resp, _ := get(http.MethodPost, "/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %s, want 405", resp.Status)
	}
	for _, path := range []string{"/ui/missing.js", "/ui/assets/app.js", "/ui//app.js", "/ui/../ui/app.js", "/ui/index.html/"} {
		resp, body := get(http.MethodGet, path)
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %s %q %s, want the 404 problem", path, resp.Status, resp.Header.Get("Content-Type"), body)
		}
	}
	if resp, _ := get(http.MethodPost, "/ui/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %s, want 405", resp.Status)
	}
}
