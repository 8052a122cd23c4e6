package execution

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// take claims with the slots free at once, and, given a linger, with
// those that free within it until all are: the handlers of one claim's
// short jobs return one after another, and the next claim takes them all.
func TestTakeWaitsUpToLingerForTheSlotsToFree(t *testing.T) {
	newWorker := func(running int) *Worker {
		w := &Worker{cfg: Config{Concurrency: 4}, slots: make(chan struct{}, 4)}
		for range running {
			w.slots <- struct{}{}
		}
		return w
	}

	if got := newWorker(2).take(t.Context(), 0); got != 2 {
		t.Errorf("without a linger: took %d slots, want the 2 free", got)
	}
	if got := newWorker(2).take(t.Context(), time.Millisecond); got != 2 {
		t.Errorf("no handler returned within the linger: took %d slots, want the 2 free", got)
	}

	// The handlers return while take lingers: it takes their slots too,
	// and returns once all are free, long before its linger ends.
	w := newWorker(2)
	took := make(chan int)
	go func() { took <- w.take(t.Context(), time.Hour) }()
	<-w.slots
	<-w.slots
	if got := <-took; got != 4 {
		t.Errorf("the handlers returned while it lingered: took %d slots, want 4", got)
	}

	// Stopped while it lingers, take gives back what it took.
	w = newWorker(2)
	ctx, stop := context.WithCancel(t.Context())
	go func() { took <- w.take(ctx, time.Hour) }()
	// take takes the free slots before it lingers.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.slots) == 4 }, "take never took the free slots")
	stop()
	if got := <-took; got != 0 || len(w.slots) != 2 {
		t.Errorf("stopped while lingering: took %d slots, %d held, want 0 and the 2 running", got, len(w.slots))
	}
}

// gather batches the finishes waiting and, given a linger, those that
// arrive within it until it holds as many as executions run: the handlers
// of one claim's short jobs return one after another, and one finish
// writes them all.
func TestGatherWaitsUpToLingerForTheRunningToFinish(t *testing.T) {
	w := &Worker{finishes: make(chan *finishing)}
	send := func(n int) {
		for range n {
			w.finishes <- &finishing{}
		}
	}
	first := []*finishing{{}}

	if got := w.gather(first, 3, 0); len(got) != 1 {
		t.Errorf("without a linger, none waiting: %d finishes, want 1", len(got))
	}
	go send(1)
	testenv.Eventually(t, 10*time.Second, func() bool {
		got := w.gather(first, 3, 0)
		if len(got) == 2 {
			return true
		}
		if len(got) != 1 {
			t.Fatalf("without a linger: %d finishes, want 1 or, once the other waits, 2", len(got))
		}
		return false
	}, "gather never took the finish waiting")
	if got := w.gather(first, 3, time.Millisecond); len(got) != 1 {
		t.Errorf("none came within the linger: %d finishes, want 1", len(got))
	}

	// The others come while gather lingers: it takes them too, and returns
	// once it holds as many as run, long before its linger ends.
	got := make(chan []*finishing)
	go func() { got <- w.gather(first, 3, time.Hour) }()
	send(2)
	if b := <-got; len(b) != 3 {
		t.Errorf("the others came while it lingered: %d finishes, want 3", len(b))
	}
	// It never waits for more than run.
	go send(1)
	if b := w.gather(first, 1, time.Hour); len(b) != 1 {
		t.Errorf("one running: %d finishes, want 1", len(b))
	}
	<-w.finishes
}
