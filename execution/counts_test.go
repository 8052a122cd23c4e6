package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// TestStateCountsAddUpPerTenant: three tenants' jobs in two queues go
// through every move a job can make — claims, successes, retried and
// permanent failures, cancels of waiting and of running jobs, retries of
// ended jobs, delays, expiry at max_wait, and leases reaped
// from a killed worker process (one with a cancel requested). After each
// round of the workload, one atomic read of each queue's stats hash and
// its jobs finds each count of jobs queued, running and retrying — every
// tenant's and all of them — equal to what the jobs' states say, so the
// tenants' counts also sum to the global ones.
//
// Fails when a script that moves a job stops counting it for its tenant.
func TestStateCountsAddUpPerTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setLimit(t, "model:none", 0) // its jobs wait: until their max_wait, or for good
	tenants := []string{"acme", "globex", "initech"}
	queues := []string{job.DefaultQueue, "other"}
	ids := map[string][]string{} // by queue
	owner := map[string]string{}
	n := 0
	submit := func(s job.Submission) {
		t.Helper()
		tenant := tenants[n%len(tenants)]
		s.Kind, s.Queue = faultKind, queues[n/len(tenants)%len(queues)]
		n++
		j, _, err := f.store.Submit(t.Context(), tenant, s, "")
		if err != nil {
			t.Fatal(err)
		}
		ids[j.Queue] = append(ids[j.Queue], j.ID)
		owner[j.ID] = tenant
	}

	// A worker process takes 4 jobs and is killed, one of them with a
	// cancel requested: the survivor reaps their leases.
	for range 6 {
		submit(job.Submission{MaxAttempts: 1, Input: raw(`{"do":"ok"}`)})
	}
	p := f.startHelper(t, "block", envConcurrency+"=4", envQueues+"="+strings.Join(queues, ","))
	var held []string
	for range 4 {
		held = append(held, strings.Fields(p.Line(t, "started ", 10*time.Second))[0])
	}
	p.Stop(t) // frozen: the cancel below reaches only Redis
	if _, err := f.store.Cancel(t.Context(), owner[held[0]], held[0], false); err != nil {
		t.Fatal(err)
	}
	p.Kill(t)
	f.checkCounts(t, ids)

	f.startWorker(t, execution.Config{Queues: queues, Concurrency: 8}, map[string]execution.Handler{
		faultKind: func(_ context.Context, e *execution.Execution) (any, error) {
			var in struct{ Do string }
			_ = json.Unmarshal(e.Input, &in)
			time.Sleep(rand.N(3 * time.Millisecond))
			switch in.Do {
			case "fail":
				return nil, errors.New("fails, may be retried")
			case "permanent":
				return nil, execution.Permanent(errors.New("fails for good"))
			}
			return "ok", nil
		},
	})
	for i, id := range held {
		var j job.Job
		testenv.Eventually(t, 10*time.Second, func() bool {
			var err error
			j, err = f.store.Get(t.Context(), owner[id], id, false)
			return err == nil && j.State.Terminal()
		}, "job %s of the killed worker was not reaped", id)
		want := job.CodeLeaseLost
		if i == 0 {
			want = job.CodeCancelled
		}
		if j.Error == nil || j.Error.Code != want {
			t.Fatalf("job %s of the killed worker ended %s with %+v, want %s", id, j.State, j.Error, want)
		}
	}
	outcomes := []string{"ok", "ok", "fail", "permanent"}
	retried := 0
	for round := range 8 {
		for i := range 24 {
			s := job.Submission{MaxAttempts: 1 + rand.N(3), Input: raw(`{"do":"` + outcomes[rand.N(len(outcomes))] + `"}`)}
			switch i % 8 {
			case 0:
				s.ConcurrencyKeys = []string{"model:none"}
				if i%16 == 0 {
					s.MaxWait = job.Duration(100 * time.Millisecond)
				}
			case 1:
				s.Delay = job.Duration(50 * time.Millisecond)
			}
			submit(s)
		}
		// Cancels and retries of jobs in whatever state they are in now.
		for range 12 {
			q := queues[rand.N(len(queues))]
			id := ids[q][rand.N(len(ids[q]))]
			if rand.N(2) == 0 {
				if _, err := execution.CancelJob(t.Context(), f.store, f.flags, owner[id], id, false); err != nil && !errors.Is(err, job.ErrConflict) {
					t.Fatal(err)
				}
			} else if _, err := f.store.Retry(t.Context(), owner[id], id, false); err == nil {
				retried++
			} else if !errors.Is(err, job.ErrNotRetryable) {
				t.Fatal(err)
			}
		}
		if round%2 == 1 {
			f.checkCounts(t, ids)
		}
	}

	// Until nothing moves any more: no job running or retrying, and the
	// only jobs queued are those held by the full key.
	var seen map[string]jobRecord
	deadline := time.Now().Add(20 * time.Second)
	for settled := false; !settled; {
		if time.Now().After(deadline) {
			t.Fatalf("jobs still moving after 20s")
		}
		seen = f.checkCounts(t, ids)
		settled = true
		for _, r := range seen {
			settled = settled && r.state != job.StateRunning && r.state != job.StateRetrying &&
				(r.state != job.StateQueued || strings.Contains(r.keys, "model:none"))
		}
	}

	// The workload took every path it is meant to.
	byState, byCode := map[job.State]int{}, map[string]int{}
	for _, r := range seen {
		byState[r.state]++
		byCode[r.code]++
	}
	if byState[job.StateQueued] == 0 || byState[job.StateSucceeded] == 0 || byState[job.StateFailed] == 0 ||
		byState[job.StateCancelled] == 0 || byState[job.StateExpired] == 0 || retried == 0 {
		t.Errorf("the workload missed a path: states %v, error codes %v, %d retried", byState, byCode, retried)
	}
	t.Logf("%d jobs: states %v, error codes %v, %d retried", len(seen), byState, byCode, retried)
}

// jobRecord is what checkCounts reads of a job.
type jobRecord struct {
	tenant string
	state  job.State
	keys   string // concurrency_keys, as stored
	code   string // its error's code, "" for none
}

// checkCounts reads each queue's stats hash and its jobs ids[queue] in one
// transaction (a queue's keys share a slot, and a MULTI runs at once), and
// fails the test unless every tenant's count of jobs queued, running or
// retrying (<state>/<tenant>) is what the jobs say, and no count of all
// tenants (<state>) is kept: those are the sums. It returns the jobs by id.
func (f *fixture) checkCounts(t *testing.T, ids map[string][]string) map[string]jobRecord {
	t.Helper()
	ks := keys.New(f.prefix)
	out := map[string]jobRecord{}
	for _, q := range slices.Sorted(maps.Keys(ids)) {
		var stats *redis.MapStringStringCmd
		cmds := make([]*redis.SliceCmd, len(ids[q]))
		if _, err := f.rdb.TxPipelined(t.Context(), func(p redis.Pipeliner) error {
			stats = p.HGetAll(t.Context(), ks.QueueStats(q))
			for i, id := range ids[q] {
				cmds[i] = p.HMGet(t.Context(), ks.Job(q, id), "tenant", "state", "concurrency_keys", "error")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{}
		for i, id := range ids[q] {
			v := cmds[i].Val()
			r := jobRecord{tenant: fmt.Sprint(v[0]), state: job.State(fmt.Sprint(v[1])), keys: fmt.Sprint(v[2])}
			var e struct{ Code string }
			if s, _ := v[3].(string); s != "" {
				_ = json.Unmarshal([]byte(s), &e)
			}
			r.code = e.Code
			out[id] = r
			if r.state == job.StateQueued || r.state == job.StateRunning || r.state == job.StateRetrying {
				want[string(r.state)+"/"+r.tenant]++
			}
		}
		got := map[string]int{}
		for field, v := range stats.Val() {
			state, tenant, own := strings.Cut(field, "/")
			if !slices.Contains([]job.State{job.StateQueued, job.StateRunning, job.StateRetrying, job.StateWaiting,
				job.StateSucceeded, job.StateFailed, job.StateCancelled, job.StateExpired}, job.State(state)) {
				continue
			}
			if !own || tenant == "" {
				t.Fatalf("queue %s: stats field %s counts no tenant's jobs", q, field)
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("queue %s: stats field %s = %q", q, field, v)
			}
			if n != 0 {
				got[field] = n
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("queue %s: counts %v, but its jobs say %v", q, got, want)
		}
	}
	return out
}
