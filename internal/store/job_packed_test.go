package store

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A script that finds a packed job where it needs its fields fails
// having written nothing, and run unpacks the job and runs it again: the
// cancel, the signal and the retry answer as for the job before it was
// packed; the delete deletes it as it is. Run through the scripts directly: the Store's own
// reads before them unpack a job already (hashFields), so only a job
// packed between those reads and its script takes this way. A replay's
// (job_submit.lua) is execution's TestFoldedJobReadsAsBefore's.
//
// Fails when a script takes a packed job for a missing one.
func TestScriptsUnpackAPackedJobFirst(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s, j := packedStore(t, b.Client)
			q, lane := j.Queue, j.Kind+`["tenant:acme"]`
			hash, folded := s.keys.Job(q, j.ID), s.keys.JobFolded(q, j.ID)
			for i, c := range []struct {
				name    string
				call    layouter
				script  *scripts.Script
				outcome string
			}{
				{"cancel", cancelCall{queue: q, id: j.ID, lane: lane, owner: "acme", retention: s.jobs.retention}, jobCancelScript, "unchanged"},
				{"signal", signalCall{queue: q, id: j.ID, lane: lane, owner: "acme", name: "go", data: []byte("null")}, jobSignalScript, "ended"},
				{"retry", retryCall{queue: q, owner: "acme", ids: []string{j.ID}, lanes: []string{lane}, records: true}, jobRetryScript, "retried"},
			} {
				if i > 0 {
					packAs(t, s, hash, folded)
				}
				res, err := s.run(ctx, c.script, c.call).Result()
				if c.name == "retry" && err == nil {
					res = res.([]any)[0]
				}
				r, err := decodeVerdict(res)
				if err != nil {
					t.Fatalf("%s: %v (%v)", c.name, err, res)
				}
				got, err := r.job(q, j.ID)
				if r.outcome != c.outcome || err != nil || got.ID != j.ID || string(got.Input) != `{"n":1}` {
					t.Fatalf("%s of the packed job: %s (job %q %s), %v; want %s and the job", c.name, r.outcome, got.ID, got.State, err, c.outcome)
				}
			}
			// The retry left it queued: cancelled and packed again, it is
			// deleted.
			j, err := s.Cancel(ctx, "acme", j.ID, false)
			if err != nil || j.State != job.StateCancelled {
				t.Fatalf("cancel: %s, %v", j.State, err)
			}
			if err := s.rdb.Set(ctx, folded, `{"f":{},"E":[]}`, 0).Err(); err != nil {
				t.Fatal(err)
			}
			s.rdb.HSet(ctx, hash, "folded", "1")
			packAs(t, s, hash, folded)
			// A Store that does not know the job's queue finds it packed.
			fresh := New(b.Client, Config{Prefix: s.keys.Prefix()})
			if got, err := fresh.Get(ctx, "acme", j.ID, false); err != nil || got.State != job.StateCancelled {
				t.Fatalf("the packed job read by a new Store: %s, %v", got.State, err)
			}
			res, err := s.run(ctx, jobDeleteScript, deleteCall{queue: q, id: j.ID, tenant: "acme", owner: "acme", idemTTL: s.jobs.idemTTL}).Result()
			if r, err2 := decodeVerdict(res); err != nil || err2 != nil || r.outcome != "deleted" {
				t.Fatalf("delete of the packed job: %v, %v, %v", res, err, err2)
			}
			if n := s.rdb.Exists(ctx, hash, folded).Val(); n != 0 {
				t.Fatalf("deleted: %d of its keys left", n)
			}
		})
	}
}

// Another tenant's cancel, signal or retry of a packed job finds no job,
// as for one that never existed, and leaves it packed: the scripts check
// the tenant in its value's head before they ask for it unpacked.
//
// Fails when another tenant's call unpacks the job, or finds it.
func TestAnotherTenantLeavesAPackedJobPacked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, j := packedStore(t, testenv.Redis(t).Client(t))
	q, lane := j.Queue, j.Kind+`["tenant:acme"]`
	hash := s.keys.Job(q, j.ID)
	for _, c := range []struct {
		name   string
		call   layouter
		script *scripts.Script
	}{
		{"cancel", cancelCall{queue: q, id: j.ID, lane: lane, owner: "other", retention: s.jobs.retention}, jobCancelScript},
		{"signal", signalCall{queue: q, id: j.ID, lane: lane, owner: "other", name: "go", data: []byte("null")}, jobSignalScript},
		{"retry", retryCall{queue: q, owner: "other", ids: []string{j.ID}, lanes: []string{lane}}, jobRetryScript},
	} {
		res, err := s.run(ctx, c.script, c.call).Result()
		if c.name == "retry" && err == nil {
			res = res.([]any)[0]
		}
		if r, err2 := decodeVerdict(res); err != nil || err2 != nil || r.outcome != "missing" {
			t.Fatalf("another tenant's %s: %v, %v, %v; want missing", c.name, res, err, err2)
		}
		if s.rdb.Exists(ctx, hash).Val() != 0 {
			t.Fatalf("another tenant's %s unpacked the job", c.name)
		}
	}
}

// A packed job is deleted as it is, by its tenant alone: its tenant is in
// its value's head, so neither Delete nor its script unpacks it, and one
// whose value does not unpack (a bug's, a hand's) is deleted too.
func TestDeleteAPackedJobAsItIs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, j := packedStore(t, testenv.Redis(t).Client(t))
	hash, folded := s.keys.Job(j.Queue, j.ID), s.keys.JobFolded(j.Queue, j.ID)
	if _, err := s.Delete(ctx, "beta", j.ID, false); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v, want ErrNotFound", err)
	}
	if err := s.rdb.Set(ctx, folded, "\x01acme\x00not deflate", redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, "acme", j.ID, false); err != nil {
		t.Fatalf("delete of a packed job whose value does not unpack: %v", err)
	}
	if n := s.rdb.Exists(ctx, hash, folded).Val(); n != 0 {
		t.Fatalf("deleted: %d of its keys left", n)
	}
	if err := s.rdb.ZScore(ctx, s.keys.QueueTenantJobs(j.Queue, "acme"), j.ID).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("deleted: still in its tenant's listing (%v)", err)
	}
}

// packedJob returns a job of tenant acme, cancelled, folded as a fold
// leaves a job of no long field (its events stay in its hash's states
// field here), and packed.
func packedJob(t *testing.T, s *Store) job.Job {
	t.Helper()
	ctx := t.Context()
	j, _, err := s.Submit(ctx, "acme", job.Submission{Kind: "echo", Input: json.RawMessage(`{"n":1}`)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if j, err = s.Cancel(ctx, "acme", j.ID, false); err != nil || j.State != job.StateCancelled {
		t.Fatalf("cancel: %s, %v", j.State, err)
	}
	hash, folded := s.keys.Job(j.Queue, j.ID), s.keys.JobFolded(j.Queue, j.ID)
	if err := s.rdb.HSet(ctx, hash, "folded", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.Set(ctx, folded, `{"f":{},"E":[]}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	packAs(t, s, hash, folded)
	return j
}

// packedStore returns a Store on rdb, under a prefix of the test's own,
// and a packed job of it (packedJob).
func packedStore(t *testing.T, rdb redis.UniversalClient) (*Store, job.Job) {
	t.Helper()
	s := New(rdb, Config{Prefix: testenv.Prefix(t)})
	return s, packedJob(t, s)
}

// packAs packs the job of hash and folded as a reaper does.
func packAs(t *testing.T, s *Store, hash, folded string) {
	t.Helper()
	ctx := t.Context()
	value, err := scripts.Pack(s.rdb.HGetAll(ctx, hash).Val(), []byte(s.rdb.Get(ctx, folded).Val()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, hash)
		p.SetArgs(ctx, folded, value, redis.SetArgs{KeepTTL: true})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
