package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// BenchmarkChatCall measures what POST /v1/chat/completions adds to a call
// when the model's key has room: the same completion asked of the fake
// upstream directly and through the API, in one run; p50-µs and p99-µs
// are each call's latency.
func BenchmarkChatCall(b *testing.B) {
	llm := fakellm.New(fakellm.Config{})
	upstream := httptest.NewServer(llm)
	b.Cleanup(func() { llm.Close(); upstream.Close() })
	rdb := testenv.Redis(b).Client(b)
	keys, err := httpapi.ParseKeys(apiKeys)
	if err != nil {
		b.Fatal(err)
	}
	prefix := testenv.Prefix(b)
	h, err := httpapi.New(httpapi.Config{Redis: rdb, Keys: keys, Prefix: prefix, NATS: testenv.NATS(b).Conn(b),
		LLM: httpapi.LLMConfig{BaseURL: upstream.URL + "/v1"}})
	if err != nil {
		b.Fatal(err)
	}
	api := httptest.NewServer(h)
	b.Cleanup(api.Close)
	store := store.New(rdb, store.Config{Prefix: prefix})
	// A limit and a tpm budget with room: the call takes the line's way
	// with its budget, and never waits.
	limit := int64(100)
	if err := store.SetKeyLimit(b.Context(), "model:fake", job.KeyLimit{Limit: &limit, Budget: job.Budget{TPM: job.MaxBudget}}); err != nil {
		b.Fatal(err)
	}
	body := chatBody("hello there", false, 1)
	for _, tc := range []struct{ name, url, key string }{
		{"direct", upstream.URL + "/v1/chat/completions", ""},
		{"leasehold", api.URL + "/v1/chat/completions", acmeKey},
	} {
		b.Run(tc.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, tc.url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if tc.key != "" {
					req.Header.Set("Authorization", "Bearer "+tc.key)
				}
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				took = append(took, time.Since(start))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%d", resp.StatusCode)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
