package kinds

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/job"
)

func TestNotifyAllow(t *testing.T) {
	t.Parallel()
	allow, err := ParseNotifyAllow(" https://hooks.example.com , http://h.example:8080/api,https://x.example/in/")
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]bool{
		"https://hooks.example.com":                  true,
		"https://hooks.example.com/a/b?x=1":          true,
		"https://HOOKS.example.com/a":                true,
		"http://h.example:8080/api":                  true,
		"http://h.example:8080/api/x":                true,
		"http://h.example:8080/api?x=1":              true,
		"https://x.example/in/anything":              true,
		"http://hooks.example.com/a":                 false, // another scheme
		"https://hooks.example.com.evil.net/":        false,
		"https://hooks.example.com:444/":             false,
		"https://hooks.example.com@169.254.169.254/": false,
		"https://u:p@hooks.example.com/":             false,
		"http://h.example:8080/api-admin":            false,
		"http://h.example:8080/api/../admin":         false,
		"http://h.example:8080/api/%2e%2e/admin":     false,
		"http://h.example:80800/api":                 false,
		"https://x.example/in":                       false,
		"http://127.0.0.1:8080/":                     false,
		"file:///etc/passwd":                         false,
		"gopher://hooks.example.com/":                false,
		"https://hooks.example.com/#frag":            false,
		"":                                           false,
	} {
		if got := allow.Allows(raw); got != want {
			t.Errorf("Allows(%q) = %v, want %v", raw, got, want)
		}
	}
	loopback := NotifyAllow{Loopback: true}
	for raw, want := range map[string]bool{
		"http://127.0.0.1:9/x": true, "http://localhost:1/": true, "https://[::1]:2/": true,
		"http://10.0.0.1/": false, "http://169.254.169.254/latest/meta-data/": false, "ftp://127.0.0.1/": false,
	} {
		if got := loopback.Allows(raw); got != want {
			t.Errorf("loopback Allows(%q) = %v, want %v", raw, got, want)
		}
	}
	for _, bad := range []string{"hooks.example.com", "ftp://x/", "https://x/?q=1", "https://u:p@x/"} {
		if _, err := ParseNotifyAllow(bad); err == nil {
			t.Errorf("ParseNotifyAllow(%q) accepted", bad)
		}
	}
}

// TestSleepNotifyReachesOnlyWhatIsAllowed: the worker calls an allowed
// notify_url, follows no redirect out of the allowed prefix, refuses a
// notify_url outside it before connecting, and a port that does not speak
// HTTP does not get its banner into the job's public error.
func TestSleepNotifyReachesOnlyWhatIsAllowed(t *testing.T) {
	t.Parallel()
	var hooks, internal atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/ok", func(w http.ResponseWriter, r *http.Request) { hooks.Add(1) })
	mux.HandleFunc("/hooks/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/internal", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/internal", func(w http.ResponseWriter, r *http.Request) { internal.Add(1) })
	banner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer banner.Close()
	go func() {
		for {
			c, err := banner.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6 internal-host-secret\r\n"))
			c.Close()
		}
	}()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	allow, err := ParseNotifyAllow(srv.URL + "/hooks/," + "http://" + banner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f := startKinds(t, http.NotFoundHandler(), SleepConfig{Allow: allow}, LLMConfig{}, execution.Config{}, nil)
	run := func(notify string) job.Job {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"duration": "250ms", "tick": "100ms", "notify_url": notify})
		j, _, err := f.store.Submit(t.Context(), "acme", job.Submission{Kind: "sleep", Input: in, MaxAttempts: 1}, "")
		if err != nil {
			t.Fatal(err)
		}
		return f.wait(t, j.ID, job.StateSucceeded, job.StateFailed)
	}

	if j := run(srv.URL + "/hooks/ok"); j.State != job.StateSucceeded || hooks.Load() == 0 {
		t.Errorf("allowed notify_url: %s %+v, %d calls", j.State, j.Error, hooks.Load())
	}
	for name, notify := range map[string]string{
		"redirect":      srv.URL + "/hooks/redirect",
		"not allowed":   srv.URL + "/internal",
		"not HTTP":      "http://" + banner.Addr().String() + "/",
		"dot segments":  srv.URL + "/hooks/../internal",
		"user info":     strings.Replace(srv.URL, "://", "://x@", 1) + "/hooks/ok",
		"another slash": srv.URL + "/hooks//../internal",
	} {
		j := run(notify)
		if j.State != job.StateFailed || j.Error == nil {
			t.Errorf("%s: %s, want failed", name, j.State)
			continue
		}
		if msg := j.Error.Message; strings.Contains(msg, "SSH") || strings.Contains(msg, "secret") ||
			strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "Redirect") {
			t.Errorf("%s: the job's error tells what the far end said: %q", name, msg)
		}
	}
	if n := internal.Load(); n != 0 {
		t.Errorf("the worker reached /internal %d times", n)
	}
}
