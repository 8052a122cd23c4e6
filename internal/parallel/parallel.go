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
// the caller's goroutine, so one part (n = 1, one CPU) starts none. A
// panic in a part is raised again on the caller's goroutine once every
// part has returned, where the caller's recovery (net/http's, for a
// request) can see it: a goroutine's own panic would end the process.
func Each(n int, f func(i int)) {
	size := max(1, (n+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0))
	part := func(lo int) {
		for i := lo; i < min(lo+size, n); i++ {
			f(i)
		}
	}
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for lo := 0; lo+size < n; lo += size {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					once.Do(func() { panicked = p })
				}
			}()
			part(lo)
		})
	}
	defer func() {
		wg.Wait()
		if panicked != nil {
			panic(panicked)
		}
	}()
	if n > 0 {
		part((n - 1) / size * size)
	}
}
