// Package parallel runs the independent steps of one request on every CPU:
// a batch's thousand items are decoded and checked at once, while nothing
// else of the request can run (its Redis work waits for them).
package parallel

import (
	"runtime"
	"sync"
)

// Each calls f(i) for each i in [0, n), in one part of consecutive i per
// CPU at once, and returns when every call has. The last part runs on
// the caller's goroutine, so one part (n = 1, one CPU) starts none.
func Each(n int, f func(i int)) {
	size := max(1, (n+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0))
	part := func(lo int) {
		for i := lo; i < min(lo+size, n); i++ {
			f(i)
		}
	}
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += size {
		if lo+size >= n {
			part(lo)
		} else {
			wg.Go(func() { part(lo) })
		}
	}
	wg.Wait()
}
