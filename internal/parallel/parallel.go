// Package parallel runs the independent steps of one request on every CPU:
// a batch's thousand items are decoded and checked at once, while nothing
// else of the request can run (its Redis work waits for them).
package parallel

import (
	"runtime"
	"sync"
)

// Each calls f(i) for each i in [0, n), in one part of consecutive i per
// CPU at once, and returns when every call has.
func Each(n int, f func(i int)) {
	parts := runtime.GOMAXPROCS(0)
	size := (n + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += size {
		wg.Go(func() {
			for i := lo; i < min(lo+size, n); i++ {
				f(i)
			}
		})
	}
	wg.Wait()
}
