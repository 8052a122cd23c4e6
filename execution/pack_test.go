package execution

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// The pack script packs a folded job only as pack read it: a job whose
// hash or folded key changed since (a retry's expand, a webhook's try, an
// unpack that another caller changed) is left, and packed by a later
// pack that reads it anew, its folded key's expiry kept; not while its
// webhook delivery is pending.
//
// Fails when the script packs over a change, which would lose it.
func TestPackLeavesAJobChangedSinceRead(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t, Config{})
	ctx, q := t.Context(), f.q
	id, hash, folded := f.foldedJob()
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"a field written", func() { f.rdb.HSet(ctx, hash, "webhook_tries", `[{"at":1}]`) }},
		{"a field's value changed", func() { f.rdb.HSet(ctx, hash, "webhook_tries", `[{"at":2}]`) }},
		{"a field deleted", func() { f.rdb.HDel(ctx, hash, "webhook_tries") }},
		{"the folded key written", func() { f.rdb.Set(ctx, folded, `{"f":{"error":"x"},"E":[]}`, redis.KeepTTL) }},
	} {
		// The change comes between the pack's reads and its script.
		fired := testenv.Between(f.rdb, func(args []any) bool {
			return len(args) > 1 && args[0] == "get" && args[1] == folded
		}, c.change)
		if err := q.pack(ctx, []string{id}); err != nil || !fired() {
			t.Fatalf("%s since read: %v (changed between: %v)", c.name, err, fired())
		}
		if f.rdb.Exists(ctx, hash).Val() != 1 || scripts.IsPacked([]byte(f.rdb.Get(ctx, folded).Val())) {
			t.Fatalf("%s since read: packed", c.name)
		}
	}
	// A delivery pending (an older fold's) is its drainer's, which reads
	// its hash: the job is left until the delivery has ended.
	for _, state := range []string{"pending", "delivered"} {
		f.rdb.HSet(ctx, hash, "webhook_state", state)
		if err := q.pack(ctx, []string{id}); err != nil {
			t.Fatal(err)
		}
		if packed := f.rdb.Exists(ctx, hash).Val() == 0; packed != (state == "delivered") {
			t.Fatalf("delivery %s: packed %v", state, packed)
		}
	}
	if f.rdb.Exists(ctx, hash).Val() != 0 || !scripts.IsPacked([]byte(f.rdb.Get(ctx, folded).Val())) {
		t.Fatal("read anew: not packed")
	}
	if ttl := f.rdb.PTTL(ctx, folded).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("packed, its folded key expires in %v, want the hour it had", ttl)
	}
	if j, err := f.store.Get(ctx, "acme", id, false); err != nil || j.State != job.StateCancelled {
		t.Fatalf("packed, it reads %s, %v", j.State, err)
	}
}

// The claim's retirement reads a packed job's tenant, which names its
// listing entry, from its folded key's head, and an unpacked one's from its
// hash, in one step: another client's unpack between the two reads would
// leave neither, and the job's listing entry behind.
func TestTenantsOfAJobUnpackedMeanwhile(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t, Config{})
	ctx, q := t.Context(), f.q
	id, hash, _ := f.foldedJob()
	if err := q.pack(ctx, []string{id}); err != nil || f.rdb.Exists(ctx, hash).Val() != 0 {
		t.Fatalf("not packed: %v", err)
	}
	fired := testenv.Between(f.rdb, func(args []any) bool {
		return len(args) > 1 && args[0] == "hget" && args[1] == hash
	}, func() {
		if _, err := f.store.Cancel(ctx, "acme", id, false); err != nil { // it unpacks the job
			t.Errorf("cancel: %v", err)
		}
	})
	tenants, err := q.tenantsOf(ctx, []string{id})
	if err != nil || !fired() || tenants[0] != "acme" {
		t.Fatalf("tenant of the retired job: %q, %v (another client came between: %v); want acme", tenants, err, fired())
	}
}

// A job unpacked by a script that may write it, and did not (a cancel of
// a job that ended), is packed again by the fold a minute later (job.repackAfter): a
// client that cancels ended jobs, or replays its submissions, does not
// undo the packing for the rest of their retention. One that changed
// since (a retry) is not.
//
// Fails when the fold leaves an unpacked job unpacked, or packs one that
// runs again.
func TestAJobUnpackedIsPackedAgain(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t, Config{})
	ctx, q := t.Context(), f.q
	id, hash, folded := f.foldedJob()
	later := q.keys.QueueFoldLater(q.name)
	isPacked := func() bool {
		return f.rdb.Exists(ctx, hash).Val() == 0 && scripts.IsPacked([]byte(f.rdb.Get(ctx, folded).Val()))
	}
	if err := q.pack(ctx, []string{id}); err != nil || !isPacked() {
		t.Fatalf("not packed: %v", err)
	}
	fold := func() {
		t.Helper()
		for more := true; more; {
			var err error
			if more, err = q.fold(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	fold() // past the job in the retired index, as the fold that folded it

	if j, err := f.store.Cancel(ctx, "acme", id, false); err != nil || j.State != job.StateCancelled {
		t.Fatalf("cancel of the cancelled job: %s, %v", j.State, err)
	}
	if isPacked() {
		t.Fatal("the cancel did not unpack the job")
	}
	if at := f.rdb.ZScore(ctx, later, id).Val(); at < float64(time.Now().Add(30*time.Second).UnixMilli()) {
		t.Fatalf("unpacked: to be packed again at %v, want about a minute from now", at)
	}
	fold()
	if isPacked() {
		t.Fatal("packed again before repackAfter")
	}
	f.due(later, id)
	fold()
	if !isPacked() || f.rdb.ZScore(ctx, later, id).Err() == nil {
		t.Fatal("not packed again once due, or still in fold_later")
	}

	if _, err := f.store.Retry(ctx, "acme", id, false); err != nil {
		t.Fatal(err)
	}
	f.due(later, id)
	fold()
	if isPacked() || f.rdb.HGet(ctx, hash, "state").Val() != string(job.StateQueued) {
		t.Fatal("a job retried after its unpack was packed again")
	}
}

// foldedJob returns a job of acme, cancelled and folded as a fold leaves
// a job of no long field (its events stay in its hash's states field
// here), with its hash and folded key.
func (f *queueFixture) foldedJob() (id, hash, folded string) {
	f.t.Helper()
	ctx, q := f.t.Context(), f.q
	id = f.submit("acme", job.Submission{})
	if j, err := f.store.Cancel(ctx, "acme", id, false); err != nil || j.State != job.StateCancelled {
		f.t.Fatalf("cancel: %s, %v", j.State, err)
	}
	hash, folded = q.keys.Job(q.name, id), q.keys.JobFolded(q.name, id)
	f.rdb.HSet(ctx, hash, "folded", "1")
	f.rdb.Set(ctx, folded, `{"f":{},"E":[]}`, time.Hour)
	return id, hash, folded
}
