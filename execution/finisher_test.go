package execution

import (
	"testing"
	"time"
)

// gatherFixture is a worker with n executions in flight, and their
// finishes, none sent yet.
func gatherFixture(n int) (*Worker, []*finishing) {
	w := &Worker{finishes: make(chan *finishing), running: map[*Execution]*running{}}
	fs := make([]*finishing, n)
	for i := range fs {
		e := &Execution{JobID: string(rune('a' + i))}
		w.running[e] = &running{e: e}
		fs[i] = &finishing{e: e}
	}
	return w, fs
}

// sendAll sends fs to the finisher, one after another, as runners whose
// handlers return together do.
func sendAll(w *Worker, fs []*finishing) {
	go func() {
		for _, f := range fs {
			w.finishes <- f
		}
	}()
}

// The finishes of executions whose handlers return together go in one
// batch, and the finisher stops lingering once every execution in flight
// is in it: with an hour's linger, a gather that waited it out would
// never end (the test's deadline fails it).
func TestFinisherGathersEveryExecutionInFlight(t *testing.T) {
	w, fs := gatherFixture(10)
	sendAll(w, fs[1:])
	if got := w.gather(fs[:1], 256, time.Hour); len(got) != 10 {
		t.Fatalf("a batch of %d finishes, want the 10 in flight", len(got))
	}
}

// While an execution in flight has not finished, the finisher lingers
// no longer than it was told, and sends what it has.
func TestFinisherLingersNoLongerThanItsLinger(t *testing.T) {
	w, fs := gatherFixture(3)
	sendAll(w, fs[1:2])
	if got := w.gather(fs[:1], 256, 20*time.Millisecond); len(got) != 2 {
		t.Fatalf("a batch of %d finishes, want the 2 sent (the third never finishes)", len(got))
	}
}

// Without a linger (the first batch, or after a write that took no
// time), and at the batch's bound, the finisher waits for nothing.
func TestFinisherWithoutLingerSendsAtOnce(t *testing.T) {
	w, fs := gatherFixture(3)
	if got := w.gather(fs[:1], 256, 0); len(got) != 1 {
		t.Fatalf("a batch of %d finishes, want the 1 given", len(got))
	}
	if got := w.gather(fs[:2], 2, time.Hour); len(got) != 2 {
		t.Fatalf("a full batch of %d finishes, want 2", len(got))
	}
}
