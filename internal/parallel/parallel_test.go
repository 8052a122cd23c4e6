package parallel_test

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/internal/parallel"
)

// Each calls f once for every index, whatever n against the CPUs.
//
// Fails when a part is left out or overlaps another (an index called
// never or twice).
func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, procs := range []int{1, 2, 3, 8} {
		prev := runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 2, 3, 7, 1000} {
			calls := make([]atomic.Int32, n)
			parallel.Each(n, func(i int) { calls[i].Add(1) })
			for i := range calls {
				if got := calls[i].Load(); got != 1 {
					t.Errorf("GOMAXPROCS %d, n %d: index %d called %d times", procs, n, i, got)
				}
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}
