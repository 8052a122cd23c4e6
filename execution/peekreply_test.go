package execution

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A peek reply that does not have the shape the claim expects is an error,
// never a panic.
func TestDecodePeekRefusesMalformedReplies(t *testing.T) {
	good := []any{[]any{`["a"]`, `["b"]`}, []any{"s1"}, []any{"l1", "s1"}, []any{"o1"}, []any{"r1"}}
	p, err := decodePeek(good)
	if err != nil {
		t.Fatalf("a well-formed reply: %v", err)
	}
	if !slices.Equal(p.heads, []string{`["a"]`, `["b"]`}) || !slices.Equal(p.retired, []string{"r1"}) {
		t.Fatalf("decoded %+v", p)
	}
	if due := p.due(); !slices.Equal(due, []string{"o1", "l1", "s1"}) {
		t.Errorf("due %v: want those past their max_wait, then expired leases, then scheduled, each once", due)
	}
	if p.full() {
		t.Error("a reply with short lists says its batch was full")
	}
	bad := map[string][]any{
		"empty":              {},
		"four lists":         good[:4],
		"six lists":          append(slices.Clone(good), []any{}),
		"heads not a list":   {`["a"]`, []any{}, []any{}, []any{}, []any{}},
		"a number for an id": {[]any{}, []any{int64(1)}, []any{}, []any{}, []any{}},
		"retired nil":        {[]any{}, []any{}, []any{}, []any{}, nil},
	}
	for name, reply := range bad {
		if _, err := decodePeek(reply); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// The peek script's reply on a real Redis decodes into each kind of work:
// the lanes at the head, a due delayed job, an expired lease, a job past
// its max_wait and a terminal job past its retention.
func TestPeekReplyOnRedis(t *testing.T) {
	rdb := testenv.Redis(t).Client(t)
	prefix := testenv.Prefix(t)
	store, err := job.NewStore(rdb, job.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(rdb, Config{Prefix: prefix, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	q := w.queues[0]
	submit := func(tenant string, s job.Submission) string {
		t.Helper()
		s.Kind = "noop"
		j, _, err := store.Submit(t.Context(), tenant, s, "")
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	past := func(key, id string) {
		t.Helper()
		if err := rdb.ZAddXX(t.Context(), key, redis.Z{Score: 1, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	running := submit("acme", job.Submission{})
	execs, _, _, err := q.claim(t.Context(), w.ID(), 1)
	if err != nil || len(execs) != 1 || execs[0].JobID != running {
		t.Fatalf("claim: %v, %v", execs, err)
	}
	past(q.keys.QueueLeases(q.name), running)
	delayed := submit("acme", job.Submission{Delay: job.Duration(time.Hour)})
	past(q.keys.QueueScheduled(q.name), delayed)
	overdue := submit("acme", job.Submission{MaxWait: job.Duration(time.Hour)})
	past(q.keys.QueueDeadlines(q.name), overdue)
	ended := submit("acme", job.Submission{})
	if _, err := store.Cancel(t.Context(), "acme", ended, false); err != nil {
		t.Fatal(err)
	}
	past(q.keys.QueueRetired(q.name), ended)
	submit("globex", job.Submission{})

	res, err := peekScript.Run(t.Context(), rdb, q.peekKeys(), 10, dueBatch).Slice()
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePeek(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.heads) != 2 || !slices.Equal(p.scheduled, []string{delayed}) || !slices.Equal(p.expired, []string{running}) ||
		!slices.Equal(p.overdue, []string{overdue}) || !slices.Equal(p.retired, []string{ended}) {
		t.Errorf("peek %+v: want 2 lanes at the head, scheduled [%s], expired [%s], overdue [%s], retired [%s]",
			p, delayed, running, overdue, ended)
	}
}
