//go:build soak

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fakellm"
)

// The soak's shape: one key with a tpm budget and a per-tenant share, a
// hostile tenant that asks its whole share for every job and has its
// streams cut short by a 1 s timeout, each job in a lane of its own, and
// a tenant of 10-token jobs beside it.
const (
	soakTPM       = 200_000
	soakHostileMT = 99_000 // max_tokens: with the prompt, the hostile tenant's whole share (tpm/2)
	hostileKey    = "e2e-hostile-0123456789abcdef"
)

// TestSoak runs the built API and worker for LEASEHOLD_SOAK (default 2m)
// under mixed tenants and checks, every second, that the budget's
// tokens_last_minute stays within [0, tpm]; at the end, that no process
// logged "ERR value is not an integer" and that every job of the quiet
// tenant ran, none waiting longer than the bound.
func TestSoak(t *testing.T) {
	length := 2 * time.Minute
	if v := os.Getenv("LEASEHOLD_SOAK"); v != "" {
		var err error
		if length, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	const bound = 5 * time.Second // the quiet tenant's submit to end
	llm := fakellm.New(fakellm.Config{Delay: 2 * time.Millisecond})
	upstream := httptest.NewServer(llm)
	t.Cleanup(upstream.Close)
	t.Cleanup(llm.Close)
	s := newSystem(t,
		"LEASEHOLD_API_KEYS=acme:e2e-key-0123456789abcdef,hostile:"+hostileKey,
		fmt.Sprintf("LEASEHOLD_LIMITS=model:fake=100;tpm=%d;per_tenant=50", soakTPM),
		"LEASEHOLD_LLM_BASE_URL="+upstream.URL+"/v1",
	)
	var notInteger atomic.Int64
	for range 2 {
		watch(t, s, "worker", "not an integer", &notInteger)
	}

	var (
		mu        sync.Mutex
		quiet     []string // the quiet tenant's jobs
		hostile   atomic.Int64
		refused   atomic.Int64
		readings  []int64
		outOfBand []int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the hostile tenant: 20 jobs in 20 lanes every 200 ms
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			items := make([]string, 20)
			for k := range items {
				items[k] = fmt.Sprintf(`{"kind":"llm.chat","timeout":"1s","max_attempts":1,"concurrency_keys":["tenant:hostile:%d"],
					"input":{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":%d}}`, i*20+k, soakHostileMT)
			}
			code, body := request(s.base, hostileKey, http.MethodPost, "/v1/jobs/batch", `{"jobs":[`+strings.Join(items, ",")+`]}`)
			if code != http.StatusOK {
				refused.Add(1)
				continue
			}
			hostile.Add(int64(strings.Count(body, `"status":201`)))
		}
	})
	wg.Go(func() { // the quiet tenant: a 10-token job every 200 ms
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			code, j := s.do(http.MethodPost, "/v1/jobs", `{"kind":"llm.chat","max_attempts":1,
				"input":{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":10}}`)
			if code == http.StatusCreated {
				mu.Lock()
				quiet = append(quiet, j.ID)
				mu.Unlock()
			}
		}
	})
	wg.Go(func() { // the budget's counter, every second
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			n, ok := tokensLastMinute(s)
			if !ok {
				continue
			}
			mu.Lock()
			readings = append(readings, n)
			if n < 0 || n > soakTPM {
				outOfBand = append(outOfBand, n)
			}
			mu.Unlock()
		}
	})
	time.Sleep(length) // the soak's length: what it measures is the load over it
	close(stop)
	wg.Wait()

	var waits []time.Duration
	var notRun []string
	for _, id := range quiet {
		j := s.waitState(id, time.Minute, "succeeded", "failed", "cancelled")
		if j.State != "succeeded" {
			notRun = append(notRun, id+" "+j.State)
		}
		waits = append(waits, ended(t, s, id))
	}
	slices.Sort(waits)
	slices.Sort(readings)
	if len(waits) == 0 || len(readings) == 0 {
		t.Fatalf("%d quiet jobs, %d readings", len(waits), len(readings))
	}
	t.Logf("soak %v: hostile jobs created %d (batches refused %d), quiet jobs %d: submit to end p50 %v p99 %v max %v; "+
		"tokens_last_minute min %d max %d of tpm %d (%d readings); 'not an integer' lines %d; upstream %+v",
		length, hostile.Load(), refused.Load(), len(waits), waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1],
		readings[0], readings[len(readings)-1], soakTPM, len(readings), notInteger.Load(), llm.Stats())
	if len(outOfBand) > 0 {
		t.Errorf("tokens_last_minute out of [0, %d]: %v", soakTPM, outOfBand)
	}
	if notInteger.Load() > 0 {
		t.Errorf("%d log lines with 'not an integer'", notInteger.Load())
	}
	if len(notRun) > 0 {
		t.Errorf("quiet jobs that did not succeed: %v", notRun)
	}
	if w := waits[len(waits)-1]; w > bound {
		t.Errorf("a quiet job took %v from submit to end, over %v", w, bound)
	}
}

// watch starts a binary of s and counts its log lines that hold substr.
func watch(t *testing.T, s *system, name, substr string, count *atomic.Int64) {
	t.Helper()
	cmd := exec.Command(binaries[name])
	cmd.Env = s.env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), substr) {
				count.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
}

// request sends body to path with key, and returns the status and body.
func request(base, key, method, path, body string) (int, string) {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// tokensLastMinute reads model:fake's tokens_last_minute from GET /v1/limits.
func tokensLastMinute(s *system) (int64, bool) {
	code, body := request(s.base, s.key, http.MethodGet, "/v1/limits", "")
	var out struct {
		Limits []struct {
			Key              string `json:"key"`
			TokensLastMinute *int64 `json:"tokens_last_minute"`
		} `json:"limits"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		return 0, false
	}
	for _, l := range out.Limits {
		if l.Key == "model:fake" && l.TokensLastMinute != nil {
			return *l.TokensLastMinute, true
		}
	}
	return 0, false
}

// ended is how long job id took from its creation to its end.
func ended(t *testing.T, s *system, id string) time.Duration {
	t.Helper()
	_, body := request(s.base, s.key, http.MethodGet, "/v1/jobs/"+id, "")
	var j struct {
		CreatedAt time.Time `json:"created_at"`
		EndedAt   time.Time `json:"finished_at"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil || j.EndedAt.IsZero() {
		t.Fatalf("job %s: %s", id, body)
	}
	return j.EndedAt.Sub(j.CreatedAt)
}
