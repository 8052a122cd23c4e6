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
