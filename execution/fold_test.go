package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A reaper folds the events of a job that ended into its folded key, and
// drops its empty fields: the job reads the same, and a replay, from the
// start or from any event, reads the same events before and after; a job
// with more events than a fold takes keeps its stream, and one whose hash
// holds short values only is folded too; a retry puts the events back in
// the stream, and the new ones follow them.
func TestFoldedEventsReadAsTheStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	handlers := map[string]execution.Handler{
		"few": func(ctx context.Context, e *execution.Execution) (any, error) {
			for _, d := range []any{"a \"quoted\" </slash> é\n", map[string]any{"n": 1.5, "x": nil}, []int{}} {
				if err := e.Emit(ctx, execution.EventProgress, d); err != nil {
					return nil, err
				}
			}
			return nil, execution.Permanent(errors.New("no"))
		},
		// 12 KB of deltas, and its result their text: more than a fold
		// takes, but for the packing.
		"answer": func(ctx context.Context, e *execution.Execution) (any, error) {
			var text strings.Builder
			for i := range 20 {
				delta := fmt.Sprintf("%03d %s", i, strings.Repeat("word ", 119))
				if err := e.Emit(ctx, execution.EventOutput, map[string]string{"text": delta}); err != nil {
					return nil, err
				}
				text.WriteString(delta)
			}
			return map[string]string{"text": text.String()}, nil
		},
		"many": func(ctx context.Context, e *execution.Execution) (any, error) {
			for i := range 120 {
				if err := e.Emit(ctx, execution.EventLog, i); err != nil {
					return nil, err
				}
			}
			return "done", nil
		},
	}
	_, stop := f.startWorker(t, execution.Config{}, handlers) // folds a minute after the end: not in this test
	// An input longer than a listpack's values, which the fold moves out of
	// the hash too (transition.lua's fold).
	input := raw(`{"prompt":"` + strings.Repeat("x", 64) + `"}`)
	few := f.submit(t, job.Submission{Kind: "few", Input: input, MaxAttempts: 1})
	many := f.submit(t, job.Submission{Kind: "many", Input: input})
	short := f.submit(t, job.Submission{Kind: "few", Input: raw(`{}`), MaxAttempts: 1})
	answer := f.submit(t, job.Submission{Kind: "answer", Input: raw(`{}`)})
	f.waitState(t, answer.ID, 10*time.Second, job.StateSucceeded)
	f.waitState(t, few.ID, 10*time.Second, job.StateFailed)
	f.waitState(t, many.ID, 10*time.Second, job.StateSucceeded)
	f.waitState(t, short.ID, 10*time.Second, job.StateFailed)
	stop()
	fewEvents, manyEvents, answerEvents := f.allEvents(t, few.ID), f.allEvents(t, many.ID), f.allEvents(t, answer.ID)
	fewJob, err := json.Marshal(f.get(t, few.ID))
	if err != nil {
		t.Fatal(err)
	}
	if len(fewEvents) != 6 || len(manyEvents) != 123 {
		t.Fatalf("%d and %d events, want 6 and 123", len(fewEvents), len(manyEvents))
	}

	f.startWorker(t, execution.Config{FoldAfter: time.Millisecond}, handlers)
	ctx := t.Context()
	ks := keys.New(f.prefix)
	hash, stream := ks.Job("default", few.ID), ks.JobEvents("default", few.ID)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, stream).Val() == 0
	}, "the job's events not folded")
	if f.rdb.Exists(ctx, ks.JobFolded("default", few.ID)).Val() != 1 {
		t.Fatal("stream gone, no folded key")
	}
	if got, _ := json.Marshal(f.get(t, few.ID)); string(got) != string(fewJob) {
		t.Fatalf("folded: %s\nwant %s", got, fewJob)
	}
	if got := f.allEvents(t, few.ID); !slices.EqualFunc(got, fewEvents, sameEvent) {
		t.Fatalf("folded: %s\nwant %s", got, fewEvents)
	}
	for i, e := range fewEvents {
		got, err := f.store.Events(ctx, "acme", few.ID, false, e.ID, 0)
		if err != nil || !slices.EqualFunc(got, fewEvents[i+1:], sameEvent) {
			t.Fatalf("after %s: %s, %v; want %s", e.ID, got, err, fewEvents[i+1:])
		}
	}
	if got, err := f.store.Events(ctx, "acme", few.ID, false, fewEvents[5].ID, 20*time.Millisecond); err != nil || len(got) != 0 {
		t.Fatalf("after the last, waiting: %v, %v", got, err)
	}
	if _, err := f.store.Events(ctx, "bob", few.ID, false, "", 0); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("another tenant: %v", err)
	}
	if f.rdb.Exists(ctx, ks.JobEvents("default", many.ID)).Val() != 1 {
		t.Fatal("the job of more events than a fold takes lost its stream")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, ks.JobEvents("default", short.ID)).Val() == 0
	}, "the job of short values not folded")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, ks.JobEvents("default", answer.ID)).Val() == 0
	}, "the job of 12 KB of deltas, its result's text, not folded")
	if got := f.allEvents(t, answer.ID); len(got) != 23 || !slices.EqualFunc(got, answerEvents, sameEvent) {
		t.Fatalf("the job of 12 KB of deltas folded: %d events, want the %d before", len(got), len(answerEvents))
	}

	// Retried, it fails again and is folded again: the old events, then
	// those of its second run.
	if f.rdb.HExists(ctx, hash, "trace").Val() {
		t.Fatal("the empty field trace kept by the fold")
	}
	if _, err := f.store.Retry(ctx, "acme", few.ID, false); err != nil {
		t.Fatal(err)
	}
	if !f.rdb.HExists(ctx, hash, "trace").Val() { // the claim reads the fields as they were
		t.Fatal("the empty field trace not written back by the retry")
	}
	f.waitState(t, few.ID, 10*time.Second, job.StateFailed)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, stream).Val() == 0
	}, "the retried job's events not folded")
	got := f.allEvents(t, few.ID)
	if len(got) != 12 || !slices.EqualFunc(got[:6], fewEvents, sameEvent) {
		t.Fatalf("after a retry: %s\nwant %s first", got, fewEvents)
	}
	want := []string{`{"state":"queued"`, `{"state":"running"`, `"a \"quoted\"`, `{"n":1.5`, `[]`, `{"state":"failed"`}
	for i, e := range got[6:] {
		if !strings.HasPrefix(string(e.Data), want[i]) {
			t.Fatalf("second run's event %d: %s, want %s...", i, e.Data, want[i])
		}
	}
}

// allEvents reads every event of job id, page by page.
func (f *fixture) allEvents(t *testing.T, id string) []job.Event {
	t.Helper()
	var all []job.Event
	after := ""
	for {
		page, err := f.store.Events(t.Context(), "acme", id, false, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < job.EventsPage {
			return all
		}
		after = page[len(page)-1].ID
	}
}

func sameEvent(a, b job.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && string(a.Data) == string(b.Data)
}

// A folded job reads as it did before its fold, whatever reads it: an
// llm.chat-like job, whose input, metadata, error and result are longer
// than a listpack's values, and a no-op one of short values only (Get with
// its input, from each shape). Each is
// read by Get, List, a replay of its events, a cancel (refused: it ended)
// and a replay of its submission; folded, its hash is a listpack. A retry
// puts it back as it was, and a second fold folds the second run too.
// Deleting one removes its folded key with the rest.
func TestFoldedJobReadsAsBefore(t *testing.T) {
	t.Parallel()
	for _, b := range testenv.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			foldedReadsAsBefore(t, newFixtureOn(t, b.Client, testenv.NATS(t).Conn(t)))
		})
	}
}

func foldedReadsAsBefore(t *testing.T, f *fixture) {
	long := strings.Repeat("the quick brown fox ", 8)
	handlers := map[string]execution.Handler{
		// Fails its first attempt, succeeds its second (after a retry). Its
		// deltas are its result's text, which the fold packs, but for the
		// plain string, the empty text and the text not in the result.
		"chat": func(ctx context.Context, e *execution.Execution) (any, error) {
			for _, d := range []any{long, map[string]any{"text": long[:30]}, map[string]any{"text": ""},
				map[string]any{"text": long[30:]}, map[string]any{"text": "token-1 token-2"}} {
				if err := e.Emit(ctx, execution.EventOutput, d); err != nil {
					return nil, err
				}
			}
			if e.Attempt() == 1 {
				return nil, execution.Permanent(errors.New("upstream refused: " + long))
			}
			return map[string]any{"text": long, "usage": map[string]int{"total_tokens": 34}}, nil
		},
		"noop": func(context.Context, *execution.Execution) (any, error) {
			return nil, execution.Permanent(errors.New("no"))
		},
	}
	ctx := t.Context()
	ks := keys.New(f.prefix)
	subs := map[string]job.Submission{
		// Fields the fold drops when they hold their usual value
		// (implied) keep any other: the chat job's.
		"chat": {Kind: "chat", Input: raw(`{"prompt":"` + long + `"}`), Metadata: raw(`{"note":"` + long + `"}`), MaxAttempts: 1,
			Priority: 7, MaxWait: job.Duration(time.Hour), OnBusy: job.OnBusyReject},
		"noop": {Kind: "noop", Input: raw(`{}`), MaxAttempts: 1},
	}
	ids := map[string]string{}
	for name, s := range subs {
		j, _, err := f.store.Submit(ctx, "acme", s, "key-"+name)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = j.ID
	}
	// run runs the jobs once with a worker that folds (fold) or does not,
	// until both ended and, with fold, are folded.
	run := func(fold bool) {
		t.Helper()
		cfg := execution.Config{} // folds a minute after the end: not in this test
		if fold {
			cfg.FoldAfter = time.Millisecond
		}
		_, stop := f.startWorker(t, cfg, handlers)
		defer stop()
		for _, id := range ids {
			f.waitState(t, id, 10*time.Second, job.StateSucceeded, job.StateFailed)
			if fold {
				testenv.Eventually(t, 10*time.Second, func() bool {
					return f.rdb.Exists(ctx, ks.JobEvents("default", id), ks.Job("default", id)).Val() == 0
				}, "job %s not folded and packed", id)
			}
		}
	}
	run(false)
	before := map[string]reads{}
	for name, id := range ids {
		before[name] = f.reads(t, id, subs[name], false)
		if got := string(before[name].job.Input); got != string(subs[name].Input) {
			t.Fatalf("the %s job reads with input %s, want %s", name, got, subs[name].Input)
		}
	}
	if enc := f.rdb.ObjectEncoding(ctx, ks.Job("default", ids["chat"])).Val(); enc != "hashtable" {
		t.Fatalf("the chat job's hash before its fold: %s, want hashtable (its values are long)", enc)
	}
	for round := range 2 {
		run(true)
		for name, id := range ids {
			if !scripts.IsPacked([]byte(f.rdb.Get(ctx, ks.JobFolded("default", id)).Val())) {
				t.Errorf("round %d: the %s job is not packed", round, name)
			}
			// The first reads that write (a cancel) unpack it: the rest
			// read it folded, its hash a listpack.
			f.reads(t, id, subs[name], false).same(t, before[name], fmt.Sprintf("round %d: %s folded", round, name))
			if enc := f.rdb.ObjectEncoding(ctx, ks.Job("default", id)).Val(); enc != "listpack" {
				t.Errorf("round %d: the %s job's hash folded: %s, want listpack", round, name, enc)
			}
			f.reads(t, id, subs[name], true).same(t, before[name], fmt.Sprintf("round %d: %s packed", round, name))
		}
		if packed := packedOutputs(t, f, ids["chat"]); round == 1 && packed != 4 {
			t.Errorf("the chat job's %d output events packed, want 4: each run's 2 deltas of its result's text", packed)
		}
		if round == 1 {
			break
		}
		// A retry expands them, packed (the last reads leave them so): as
		// they were before the fold, then their second run, which the next
		// round folds. The chat job is retried by its id, the noop job by
		// a bulk retry of the failed noop jobs.
		if _, err := f.store.Retry(ctx, "acme", ids["chat"], false); err != nil {
			t.Fatal(err)
		}
		page, err := f.store.RetryAll(ctx, job.RetryFilter{Tenant: "acme", Kind: "noop"})
		if err != nil || page.Moved["default"] != 1 {
			t.Fatalf("bulk retry of the packed noop job: %+v, %v", page, err)
		}
		for name, id := range ids {
			if n := f.rdb.Exists(ctx, ks.JobFolded("default", id)).Val(); n != 0 || f.rdb.HExists(ctx, ks.Job("default", id), "folded").Val() {
				t.Fatalf("the %s job retried: its folded key or marker is left", name)
			}
		}
		run(false)
		for name, id := range ids {
			r := f.reads(t, id, subs[name], false)
			if !slices.EqualFunc(r.events[:len(before[name].events)], before[name].events, sameEvent) {
				t.Fatalf("%s retried: events %s\nwant %s first", name, r.events, before[name].events)
			}
			before[name] = r
		}
		if j := before["chat"].job; j.State != job.StateSucceeded || !strings.Contains(string(j.Result), long) {
			t.Fatalf("the chat job's second run: %s %s", j.State, j.Result)
		}
	}

	// Deleted, nothing of it is left.
	for _, id := range ids {
		if _, err := f.store.Delete(ctx, "acme", id, false); err != nil {
			t.Fatal(err)
		}
		if n := f.rdb.Exists(ctx, ks.Job("default", id), ks.JobEvents("default", id), ks.JobFolded("default", id)).Val(); n != 0 {
			t.Fatalf("job %s deleted: %d of its keys left", id, n)
		}
	}
}

// foldedJSON returns the JSON of job id's folded key, packed or not.
func (f *fixture) foldedJSON(t *testing.T, id string) []byte {
	t.Helper()
	b, err := f.rdb.Get(t.Context(), keys.New(f.prefix).JobFolded("default", id)).Bytes()
	if err == nil && scripts.IsPacked(b) {
		var p scripts.Packed
		p, err = scripts.Unpack(b)
		b = p.Folded
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// packedOutputs returns how many output events of job id's folded key the
// fold packed as a run of its result (type "o").
func packedOutputs(t *testing.T, f *fixture, id string) int {
	t.Helper()
	var folded struct{ E []string }
	if err := json.Unmarshal(f.foldedJSON(t, id), &folded); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 1; i < len(folded.E); i += 3 {
		if folded.E[i] == "o" {
			n++
		}
	}
	return n
}

// reads is what each reader of a job answers, as the API shows it.
type reads struct {
	job                   job.Job
	get, listed, refused  string // Get, List's entry and Cancel's refusal, as JSON
	refusedIn, replayedIn string // the input of Cancel's and a replay's job
	replayed              string // a replay of its submission, as JSON
	signalled             string // Signal's refusal, as JSON
	events                []job.Event
}

// pack packs job id, folded, as its reaper does after the fold
// (execution.Pack): its hash and folded key become its folded key alone.
// A job packed already is left.
func (f *fixture) pack(t *testing.T, id string) {
	t.Helper()
	w, err := execution.NewWorker(f.rdb, execution.Config{Prefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := execution.Pack(t.Context(), w, id); err != nil {
		t.Fatal(err)
	}
}

// reads reads job id, submitted as s with the idempotency key key-<kind>;
// packed, with the job packed (pack) before each reader: those that only
// read leave it packed, those that may write (a cancel, a replay, a
// signal) unpack it first.
func (f *fixture) reads(t *testing.T, id string, s job.Submission, packed bool) reads {
	t.Helper()
	ctx := t.Context()
	pack := func(what string) {
		t.Helper()
		if packed {
			f.pack(t, id)
			if n := f.rdb.Exists(ctx, keys.New(f.prefix).Job("default", id)).Val(); n != 0 {
				t.Fatalf("job %s packed for %s: its hash is left", id, what)
			}
		}
	}
	var r reads
	marshal := func(j job.Job) string {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	kept := func(what string) {
		t.Helper()
		if packed && f.rdb.Exists(ctx, keys.New(f.prefix).Job("default", id)).Val() != 0 {
			t.Fatalf("job %s: read by %s, it was unpacked", id, what)
		}
	}
	pack("Get")
	r.job = f.get(t, id)
	r.get = marshal(r.job)
	kept("Get")
	pack("List")
	list, _, err := f.store.List(ctx, job.ListQuery{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range list {
		if j.ID == id {
			r.listed = marshal(j)
		}
	}
	kept("List")
	pack("Cancel")
	refused, err := f.store.Cancel(ctx, "acme", id, false)
	if !errors.Is(err, job.ErrConflict) {
		t.Fatalf("cancel of ended job %s: %v", id, err)
	}
	r.refused, r.refusedIn = marshal(refused), string(refused.Input)
	pack("a replay")
	replayed, created, err := f.store.Submit(ctx, "acme", s, "key-"+s.Kind)
	if err != nil || created {
		t.Fatalf("replay of job %s: created %v, %v", id, created, err)
	}
	r.replayed, r.replayedIn = marshal(replayed), string(replayed.Input)
	pack("Signal")
	signalled, resumed, err := f.store.Signal(ctx, "acme", id, false, "approval", nil)
	if !errors.Is(err, job.ErrConflict) || resumed {
		t.Fatalf("signal to ended job %s: resumed %v, %v", id, resumed, err)
	}
	r.signalled = marshal(signalled)
	pack("Events")
	r.events = f.allEvents(t, id)
	kept("Events")
	return r
}

// same fails the test when r and want differ.
func (r reads) same(t *testing.T, want reads, what string) {
	t.Helper()
	for _, c := range []struct{ name, got, want string }{
		{"Get", r.get, want.get}, {"Get's input", string(r.job.Input), string(want.job.Input)},
		{"List", r.listed, want.listed}, {"Cancel", r.refused, want.refused},
		{"Cancel's input", r.refusedIn, want.refusedIn}, {"replay", r.replayed, want.replayed},
		{"replay's input", r.replayedIn, want.replayedIn}, {"Signal", r.signalled, want.signalled},
	} {
		if c.got != c.want || c.got == "" {
			t.Errorf("%s: %s reads %s\nwant %s", what, c.name, c.got, c.want)
		}
	}
	if !slices.EqualFunc(r.events, want.events, sameEvent) {
		t.Errorf("%s: events %s\nwant %s", what, r.events, want.events)
	}
}

// A folded job past its retention goes with its folded key; packed, with
// its entry in its tenant's listing and its charge of retained bytes,
// whose tenant only the packed value holds then.
func TestFoldedJobRetired(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startWorker(t, execution.Config{FoldAfter: time.Millisecond, Retention: 2 * time.Second},
		map[string]execution.Handler{"echo": echo})
	j := f.submit(t, job.Submission{Kind: "echo", Input: raw(`{"prompt":"` + strings.Repeat("x", 100) + `"}`)})
	ks, ctx := keys.New(f.prefix), t.Context()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, ks.JobFolded("default", j.ID)).Val() == 1
	}, "job not folded")
	f.pack(t, j.ID)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, ks.Job("default", j.ID), ks.JobEvents("default", j.ID), ks.JobFolded("default", j.ID)).Val() == 0
	}, "job past its retention: some of its keys left")
	if err := f.rdb.ZScore(ctx, ks.QueueTenantJobs("default", "acme"), j.ID).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("job past its retention: still in its tenant's listing (%v)", err)
	}
	if n := f.rdb.Exists(ctx, ks.QueueRetained("default", "acme")).Val(); n != 0 {
		t.Fatalf("job past its retention: its tenant's retained bytes are still charged (%v)",
			f.rdb.HGetAll(ctx, ks.QueueRetained("default", "acme")).Val())
	}
}

// A folded job's key expires a day after the end of its retention, its
// retired score, so that a reaper of the versions before the folded
// key's, which deletes the job's hash and stream alone, leaves nothing
// behind for long, and one late to delete the job still finds its fields;
// a retry takes the key and its expiry away with it (expand), and the
// job's next fold sets the expiry of its next retention.
//
// Fails when the folded key has no expiry or another one, or when a
// retried job's key keeps the expiry of its first end.
func TestFoldedKeyExpiresADayAfterTheRetentionEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fail := map[string]execution.Handler{"fail": func(context.Context, *execution.Execution) (any, error) {
		return nil, execution.Permanent(errors.New("no"))
	}}
	ks, ctx := keys.New(f.prefix), t.Context()
	j := f.submit(t, job.Submission{Kind: "fail", Input: raw(`{"prompt":"` + strings.Repeat("x", 100) + `"}`), MaxAttempts: 1})
	folded := ks.JobFolded("default", j.ID)
	// foldedAt waits for the job's fold and checks its key's expiry.
	foldedAt := func() int64 {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() bool {
			return f.rdb.Exists(ctx, folded).Val() == 1
		}, "job not folded")
		retireAt := f.rdb.ZScore(ctx, ks.QueueRetired("default"), j.ID).Val()
		expireAt, err := f.rdb.Do(ctx, "PEXPIRETIME", folded).Int64()
		if err != nil || expireAt != int64(retireAt)+24*time.Hour.Milliseconds() {
			t.Fatalf("folded key expires at %d (%v), want a day after its retired score %.0f", expireAt, err, retireAt)
		}
		return expireAt
	}
	_, stop := f.startWorker(t, execution.Config{FoldAfter: time.Millisecond}, fail)
	first := foldedAt()
	stop()
	if _, err := f.store.Retry(ctx, "acme", j.ID, false); err != nil {
		t.Fatal(err)
	}
	if n := f.rdb.Exists(ctx, folded).Val(); n != 0 {
		t.Fatal("retried: the folded key is left")
	}
	for _, key := range []string{ks.Job("default", j.ID), ks.JobEvents("default", j.ID)} {
		if ttl := f.rdb.PTTL(ctx, key).Val(); ttl != -1 {
			t.Fatalf("retried: %s expires in %v, want never", key, ttl)
		}
	}
	f.startWorker(t, execution.Config{FoldAfter: time.Millisecond}, fail)
	if second := foldedAt(); second <= first {
		t.Fatalf("folded again: expires at %d, want after its first end's %d", second, first)
	}
}

// failed runs a job that fails at once, its only attempt, and returns it
// as submitted; no worker runs after.
func (f *fixture) failed(t *testing.T) job.Job {
	t.Helper()
	fail := map[string]execution.Handler{"fail": func(context.Context, *execution.Execution) (any, error) {
		return nil, execution.Permanent(errors.New("no"))
	}}
	_, stop := f.startWorker(t, execution.Config{}, fail)
	defer stop()
	j := f.submit(t, job.Submission{Kind: "fail", Input: raw(`{}`), MaxAttempts: 1})
	f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
	return j
}

// A job whose events the previous version folded into its hash's field
// events reads the same, and a retry puts them back in its stream.
func TestEventsFoldedByTheOlderVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j := f.failed(t)
	want := f.allEvents(t, j.ID)
	wantJob, err := json.Marshal(f.get(t, j.ID))
	if err != nil {
		t.Fatal(err)
	}
	ks, ctx := keys.New(f.prefix), t.Context()
	// What the older fold wrote: stream id, type, data per event.
	var flat []string
	for _, e := range want {
		flat = append(flat, e.ID, e.Type, string(e.Data))
	}
	packed, err := json.Marshal(flat)
	if err != nil {
		t.Fatal(err)
	}
	f.rdb.HSet(ctx, ks.Job("default", j.ID), "events", packed)
	f.rdb.HDel(ctx, ks.Job("default", j.ID), "states")
	f.rdb.Del(ctx, ks.JobEvents("default", j.ID))
	if events := f.allEvents(t, j.ID); !slices.EqualFunc(events, want, sameEvent) {
		t.Fatalf("folded by the older version: %s\nwant %s", events, want)
	}
	if got, _ := json.Marshal(f.get(t, j.ID)); string(got) != string(wantJob) {
		t.Fatalf("folded by the older version: %s\nwant %s", got, wantJob)
	}
	if _, err := f.store.Retry(ctx, "acme", j.ID, false); err != nil {
		t.Fatal(err)
	}
	if f.rdb.HExists(ctx, ks.Job("default", j.ID), "events").Val() {
		t.Fatal("retried: the field events is left")
	}
	if events := f.allEvents(t, j.ID); len(events) != len(want)+1 || !slices.EqualFunc(events[:len(want)], want, sameEvent) {
		t.Fatalf("retried: %s\nwant %s, then the retry's", events, want)
	}
}

// A retry puts the events of a folded key back in the job's stream as
// they were before the fold packed them: each id, a state event, and the
// output deltas that are runs of the result's text (no job retried has a
// result in this version; a later one might).
func TestPackedEventsExpandedByARetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j := f.failed(t)
	submitted := f.allEvents(t, j.ID)[0]
	// Events as the fold would find them: the submit's, then a start, two
	// deltas and a failure, of ids of their own (one after a sequence).
	result := `{"text":"say \"hi\" back","usage":{"total_tokens":34}}`
	deltas := []string{`say \"hi\"`, ` back`}
	want := []job.Event{
		{ID: "1796000000000-0", Type: "state", Data: submitted.Data},
		{ID: "1796000000012-0", Type: "state", Data: raw(`{"state":"running","attempt":1,"job":["","1796000000012","0","","17","e-1","w-1","1","1796000000012","1796000000012",""]}`)},
		{ID: "1796000000012-1", Type: "output", Data: raw(`{"text":"` + deltas[0] + `"}`)},
		{ID: "1796000000013-0", Type: "output", Data: raw(`{"text":"` + deltas[1] + `"}`)},
		{ID: "1796000000020-3", Type: "state", Data: raw(`{"state":"failed","attempt":1,"job":["1796000000020","1796000000012","0","{\"code\":\"x\"}"]}`)},
	}
	run := func(d string) string { return fmt.Sprintf("%d,%d", strings.Index(result, d), len(d)) }
	packed := []string{"1796000000000-0", "state", "",
		"+12", "s", "running,1,,1796000000012,0,,17,e-1,w-1,1,1796000000012,1796000000012,",
		"+0-1", "o", run(deltas[0]), "+1", "o", run(deltas[1]), "+7-3", "state", string(want[4].Data)}
	folded, err := json.Marshal(map[string]any{"f": map[string]string{"result": result}, "E": packed})
	if err != nil {
		t.Fatal(err)
	}
	ks, ctx := keys.New(f.prefix), t.Context()
	f.rdb.HSet(ctx, ks.Job("default", j.ID), "folded", "1")
	f.rdb.HDel(ctx, ks.Job("default", j.ID), "states")
	f.rdb.Del(ctx, ks.JobEvents("default", j.ID))
	f.rdb.Set(ctx, ks.JobFolded("default", j.ID), folded, time.Hour)
	if events := f.allEvents(t, j.ID); !slices.EqualFunc(events, want, sameEvent) {
		t.Fatalf("packed: %s\nwant %s", events, want)
	}
	if _, err := f.store.Retry(ctx, "acme", j.ID, false); err != nil {
		t.Fatal(err)
	}
	if f.rdb.Exists(ctx, ks.JobFolded("default", j.ID)).Val() != 0 {
		t.Fatal("retried: the folded key is left")
	}
	if events := f.allEvents(t, j.ID); len(events) != len(want)+1 || !slices.EqualFunc(events[:len(want)], want, sameEvent) {
		t.Fatalf("retried: %s\nwant %s, then the retry's", events, want)
	}
}

// A folded job's state events keep no value its hash holds as it is
// (its last execution's, which its last events show again; a failed job,
// so that a retry can expand it): those are
// written "=" and read from the hash, or from the folded key when one
// left the hash for its length (a worker id of 100 characters). Read
// back, and put back by a retry, they are the events as they were.
func TestFoldedStateEventsReferToTheHash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fail := map[string]execution.Handler{"fail": func(context.Context, *execution.Execution) (any, error) {
		return nil, execution.Permanent(errors.New("no"))
	}}
	ctx, ks := t.Context(), keys.New(f.prefix)
	for _, worker := range []string{"w-1", strings.Repeat("w", 100)} {
		_, stop := f.startWorker(t, execution.Config{ID: worker}, fail)
		j := f.submit(t, job.Submission{Kind: "fail", Input: raw(`{}`), MaxAttempts: 1})
		f.waitState(t, j.ID, 10*time.Second, job.StateFailed)
		stop()
		before := f.allEvents(t, j.ID)

		_, stop = f.startWorker(t, execution.Config{ID: worker, FoldAfter: time.Millisecond}, fail)
		testenv.Eventually(t, 10*time.Second, func() bool {
			return f.rdb.Exists(ctx, ks.JobFolded("default", j.ID)).Val() == 1
		}, "the job not folded")
		stop()
		packed := string(f.foldedJSON(t, j.ID))
		if !strings.Contains(packed, `"running,1,,=,=,,=,=,=,=,=`) || strings.Contains(packed, worker+",") {
			t.Fatalf("worker %q: the folded key holds the hash's values again: %s", worker, packed)
		}
		if got := f.allEvents(t, j.ID); !slices.EqualFunc(got, before, sameEvent) {
			t.Fatalf("worker %q: folded: %s\nwant %s", worker, got, before)
		}
		if _, err := f.store.Retry(ctx, "acme", j.ID, false); err != nil {
			t.Fatal(err)
		}
		if got := f.allEvents(t, j.ID); len(got) < len(before) || !slices.EqualFunc(got[:len(before)], before, sameEvent) {
			t.Fatalf("worker %q: retried: %s\nwant %s first", worker, got, before)
		}
	}
}

// A folded job whose folded key is gone (it expires a day after the
// job's retention, and a queue no worker serves keeps the hash) still
// reads, by Get and in a listing: with the fields the fold dropped for
// their usual value, but without those it moved.
func TestFoldedJobWithoutItsFoldedKeyReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j := f.failed(t)
	ctx, ks := t.Context(), keys.New(f.prefix)
	_, stop := f.startWorker(t, execution.Config{FoldAfter: time.Millisecond}, nil)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return f.rdb.Exists(ctx, ks.JobFolded("default", j.ID)).Val() == 1
	}, "the job not folded")
	stop()
	// A refused cancel writes it back as it was before it was packed.
	if _, err := f.store.Cancel(ctx, "acme", j.ID, false); !errors.Is(err, job.ErrConflict) {
		t.Fatal(err)
	}
	if f.rdb.HExists(ctx, ks.Job("default", j.ID), "priority").Val() {
		t.Fatal("the fold kept priority 0")
	}
	f.rdb.Del(ctx, ks.JobFolded("default", j.ID))
	got, err := f.store.Get(ctx, "acme", j.ID, false)
	if err != nil || got.State != job.StateFailed || got.Priority != 0 || got.OnBusy != job.OnBusyQueue || got.MaxWait != 0 {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	page, _, err := f.store.List(ctx, job.ListQuery{Tenant: "acme"})
	if err != nil || len(page) != 1 || page[0].ID != j.ID {
		t.Fatalf("List: %+v, %v", page, err)
	}
}

// A job's first emitted event gives it its stream: the state events kept
// in its hash before it move there with their ids, ahead of it, and the
// later ones follow it there.
func TestFirstEmitMovesStateEventsToTheStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ks := keys.New(f.prefix)
	emitted := make(chan []job.Event, 1)
	emit := map[string]execution.Handler{"emit": func(ctx context.Context, e *execution.Execution) (any, error) {
		id := e.JobID
		before, err := f.store.Events(ctx, "acme", id, false, "", 0)
		if err != nil {
			return nil, err
		}
		if f.rdb.Exists(ctx, ks.JobEvents("default", id)).Val() != 0 {
			t.Error("a running job that emitted nothing has a stream")
		}
		if err := e.Emit(ctx, execution.EventProgress, map[string]int{"done": 1}); err != nil {
			return nil, err
		}
		if f.rdb.HExists(ctx, ks.Job("default", id), "states").Val() {
			t.Error("emitted: the field states is left")
		}
		emitted <- before
		return "ok", nil
	}}
	_, stop := f.startWorker(t, execution.Config{}, emit)
	defer stop()
	j := f.submit(t, job.Submission{Kind: "emit", Input: raw(`{}`)})
	f.waitState(t, j.ID, 10*time.Second, job.StateSucceeded)
	before := <-emitted
	all := f.allEvents(t, j.ID)
	var types []string
	for k, e := range all {
		types = append(types, e.Type)
		if k > 0 && testenv.CompareStreamIDs(all[k-1].ID, e.ID) >= 0 {
			t.Fatalf("event ids %s then %s", all[k-1].ID, e.ID)
		}
	}
	if len(before) != 2 || len(all) != 4 || !slices.EqualFunc(all[:2], before, sameEvent) ||
		!slices.Equal(types, []string{"state", "state", "progress", "state"}) {
		t.Fatalf("events %s, want those before the emit %s, the emit and the success", all, before)
	}
}
