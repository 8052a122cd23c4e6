package cancel_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// BenchmarkRequestToCancelled measures the fast path, from Request until the
// watched context is cancelled: the watcher polls hourly, so the flag is
// found by the read of the freshly watched id or by the one the NATS message
// prompts, whichever comes first.
func BenchmarkRequestToCancelled(b *testing.B) {
	e := newEnv(b)
	rdb := testenv.Redis(b).Client(b)
	wnc := testenv.NATS(b).Conn(b)
	f := e.flags(b, rdb, testenv.NATS(b).Conn(b))
	w := e.watcher(b, rdb, wnc, time.Hour)
	e.subscribed(b, testenv.NATS(b))

	i := 0
	for b.Loop() {
		id := "job-" + strconv.Itoa(i)
		i++
		ctx, stop := w.Watch(context.Background(), id)
		if err := f.Request(b.Context(), id, time.Minute); err != nil {
			b.Fatal(err)
		}
		<-ctx.Done()
		stop()
	}
}

// BenchmarkWatch measures a Watch and its stop as a worker makes them, one
// per execution with 64 executions in flight: the read of each new id's
// flag that Run makes right after it is watched is included.
func BenchmarkWatch(b *testing.B) {
	e := newEnv(b)
	rdb := testenv.Redis(b).Client(b)
	w := e.watcher(b, rdb, testenv.NATS(b).Conn(b), time.Hour)
	parent, stopParent := context.WithCancel(context.Background())
	defer stopParent()
	var inFlight [64]context.CancelFunc
	i := 0
	for b.Loop() {
		slot := &inFlight[i%len(inFlight)]
		if *slot != nil {
			(*slot)()
		}
		_, *slot = w.Watch(parent, "job-"+strconv.Itoa(i))
		i++
	}
	for _, stop := range inFlight {
		if stop != nil {
			stop()
		}
	}
}
