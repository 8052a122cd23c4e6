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

// A panic in a part started on a goroutine of its own reaches the caller,
// after every part has returned.
//
// Fails when the panic ends the process (the test binary dies), or when
// Each returns before the other parts have.
func TestEachRaisesAPartsPanicOnTheCaller(t *testing.T) {
	prev := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(prev)
	var calls atomic.Int32
	defer func() {
		if p := recover(); p != "item 0" {
			t.Errorf("recovered %v, want item 0's panic", p)
		}
		// Four parts of 25: the first stops at its panic, the others run.
		if got := calls.Load(); got != 75 {
			t.Errorf("%d calls returned before the panic reached the caller, want the other parts' 75", got)
		}
	}()
	parallel.Each(100, func(i int) {
		if i == 0 {
			panic("item 0")
		}
		calls.Add(1)
	})
	t.Error("Each returned")
}
