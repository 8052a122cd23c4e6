package execution

import (
	"slices"
	"testing"
	"time"

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
	f := newQueueFixture(t, Config{LeaseTTL: time.Minute})
	q := f.q
	running := f.submit("acme", job.Submission{})
	execs, _, _, err := q.claim(t.Context(), f.w.ID(), 1)
	if err != nil || len(execs) != 1 || execs[0].JobID != running {
		t.Fatalf("claim: %v, %v", execs, err)
	}
	f.due(q.keys.QueueLeases(q.name), running)
	delayed := f.submit("acme", job.Submission{Delay: job.Duration(time.Hour)})
	f.due(q.keys.QueueScheduled(q.name), delayed)
	overdue := f.submit("acme", job.Submission{MaxWait: job.Duration(time.Hour)})
	f.due(q.keys.QueueDeadlines(q.name), overdue)
	ended := f.submit("acme", job.Submission{})
	if _, err := f.store.Cancel(t.Context(), "acme", ended, false); err != nil {
		t.Fatal(err)
	}
	f.due(q.keys.QueueRetired(q.name), ended)
	f.submit("globex", job.Submission{})

	res, err := peekScript.Run(t.Context(), f.rdb, q.peekKeys(), 10, dueBatch, "noop").Slice()
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
