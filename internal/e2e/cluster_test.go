package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// TestFleetWideLimitOnCluster: the built binaries on the three-master Redis
// Cluster, one API and two workers serving three queues, with
// LEASEHOLD_LIMITS=model:x=3. Jobs for model:x submitted over HTTP to all
// three queues all succeed, and GET /v1/limits, polled all along, never
// reports more than 3 in use: the limit holds across queues whose hash
// slots (and masters) differ from the key's.
func TestFleetWideLimitOnCluster(t *testing.T) {
	t.Parallel()
	const (
		limit = 3
		jobs  = 24
	)
	queues := []string{"stress-a", "stress-b", "stress-c"} // three slots, none the key's (see execution/stress_test.go)
	s := newSystem(t,
		"LEASEHOLD_REDIS_URL=redis+cluster://"+strings.Join(testenv.Cluster(t).Addrs(), ","),
		fmt.Sprintf("LEASEHOLD_LIMITS=model:x=%d", limit),
		"LEASEHOLD_QUEUES="+strings.Join(queues, ","),
		"LEASEHOLD_CONCURRENCY=4")
	s.start("worker")
	s.start("worker")

	var ids []string
	for i := range jobs {
		code, j := s.do(http.MethodPost, "/v1/jobs", fmt.Sprintf(
			`{"kind":"sleep","queue":%q,"input":{"duration":"300ms"},"concurrency_keys":["model:x"]}`, queues[i%len(queues)]))
		if code != http.StatusCreated {
			t.Fatalf("submit to %s: %d", queues[i%len(queues)], code)
		}
		ids = append(ids, j.ID)
	}

	done := make(chan struct{})
	var (
		polling  sync.WaitGroup
		polls    int
		peak     int
		pollErrs []string
	)
	polling.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			inUse, err := s.inUse("model:x")
			polls++
			switch {
			case err != nil:
				pollErrs = append(pollErrs, err.Error())
			case inUse > limit:
				pollErrs = append(pollErrs, fmt.Sprintf("in_use %d, limit %d", inUse, limit))
			}
			peak = max(peak, inUse)
		}
	})
	for _, id := range ids {
		if j := s.waitState(id, 60*time.Second, "succeeded", "failed", "cancelled"); j.State != "succeeded" {
			t.Errorf("job %s ended %s (%+v)", id, j.State, j.Error)
		}
	}
	close(done)
	polling.Wait()
	for i, e := range pollErrs {
		if i == 5 {
			t.Errorf("… %d in all", len(pollErrs))
			break
		}
		t.Error("GET /v1/limits: " + e)
	}
	if peak == 0 {
		t.Errorf("GET /v1/limits never saw model:x in use in %d polls: the test proved nothing", polls)
	}
	t.Logf("%d polls of GET /v1/limits; peak in_use %d of %d", polls, peak, limit)
}

// inUse is what GET /v1/limits says of key's in_use.
func (s *system) inUse(key string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, s.base+"/v1/limits", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	var body struct {
		Limits []struct {
			Key   string `json:"key"`
			InUse int    `json:"in_use"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	for _, l := range body.Limits {
		if l.Key == key {
			return l.InUse, nil
		}
	}
	return 0, fmt.Errorf("no limit on %s in %+v", key, body.Limits)
}
