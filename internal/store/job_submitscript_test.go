package store

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// The submit script lists the jobs it creates, and only those, in the
// tenant's index, which it also reads to tell a new job from one this
// very call created before (internal/store/scripts/job_submit.lua). Run through
// the script directly: the refusal at the cap happens there only when
// another process filled the queue since this one looked (the store
// refuses before the script otherwise), and the resend is go-redis's.
//
// Fails when a job refused at the cap stays listed, or when a resent call
// creates its jobs again (its usage is counted twice).
func TestSubmitScriptListsWhatItCreates(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := New(b.Client, Config{Prefix: testenv.Prefix(t)})
			var items []*submitting
			for range 3 {
				n, err := job.Submission{Kind: "echo"}.Normalize("acme")
				if err != nil {
					t.Fatal(err)
				}
				lane, _ := json.Marshal(n.ConcurrencyKeys)
				id := jobid.New(n.Queue)
				items = append(items, &submitting{n: n, id: id, fresh: id, lane: string(lane)})
			}
			call := submitCall{tenant: "acme", queue: job.DefaultQueue, room: "1", at: time.Now(), usageTTL: time.Hour, items: items}
			a := call.layout(s.keys)
			for _, send := range []string{"first", "resent"} {
				res, err := jobSubmitScript.Run(ctx, s.rdb, a.Keys, a.Argv...).Slice()
				if err != nil {
					t.Fatal(err)
				}
				if res[0] != int64(1) || res[2] != int64(-1) || res[4] != int64(-1) {
					t.Fatalf("%s: statuses %v, %v, %v; want created (1), then the cap (-1) twice", send, res[0], res[2], res[4])
				}
				index := s.keys.QueueTenantJobs(job.DefaultQueue, "acme")
				if listed := s.rdb.ZRange(ctx, index, 0, -1).Val(); !slices.Equal(listed, []string{items[0].id}) {
					t.Errorf("%s: %s lists %v, want the created job %s alone", send, index, listed, items[0].id)
				}
				if n := s.rdb.HGet(ctx, s.keys.QueueUsage(job.DefaultQueue, call.at), "jobs_submitted/acme").Val(); n != "1" {
					t.Errorf("%s: jobs_submitted %q, want 1", send, n)
				}
			}
		})
	}
}
