package cancel_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// BenchmarkRequestToCancelled measures the fast path, from Request until the
// watched context is cancelled by the NATS message: the watcher polls hourly,
// under another prefix, so it never finds the flag itself.
func BenchmarkRequestToCancelled(b *testing.B) {
	e := newEnv(b)
	rdb := testenv.Redis(b).Client(b)
	wnc := testenv.NATS(b).Conn(b)
	f := e.flags(b, rdb, testenv.NATS(b).Conn(b))
	w := e.watcherWithPrefix(b, rdb, wnc, time.Hour, e.prefix+"elsewhere:")
	e.subscribed(b, w, wnc)

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
