package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/lease"
)

// BenchmarkWaitRelease is an uncontended Wait and Release: one poll script
// that joins the line and is granted at once, one ZREM. Compare it with
// BenchmarkAcquireRelease in the same run.
func BenchmarkWaitRelease(b *testing.B) {
	c, _ := newClient(b, testenv.Redis(b).Client(b))
	sem := c.Semaphore("k", 100, time.Minute)
	i := 0
	for b.Loop() {
		p, err := sem.Wait(b.Context(), strconv.Itoa(i), lease.WaitConfig{})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Release(); err != nil {
			b.Fatal(err)
		}
		i++
	}
	report(b, 2)
}
