package httpapi_test

import (
	"bytes"
	"errors"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
)

// peakHeap samples the process's heap (live objects and those not yet
// swept) until stop is called, and returns its highest reading.
func peakHeap() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			top = max(top, sample[0].Value.Uint64())
			select {
			case <-done:
				peak <- top
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}

// 50 concurrent batches of 16 MiB from a tenant whose rate is spent: each
// is refused before its items are decoded, and at most
// DefaultMaxTenantBatches of them are read at once, the others refused
// 429 before their body is read. The API's heap grows by less than
// batchHeapBound (docs/operations.md).
//
// Fails when the items are decoded before the rate is spent (an invalid
// item is answered 400, not 429), or when nothing bounds the batches in
// flight (each of 50 bodies in memory at once).
func TestBatchMemoryUnderConcurrentBatches(t *testing.T) {
	// Not parallel: the heap is the whole test process's.
	f := newFixture(t, withRate(t, "1/h"))
	f.submit(acmeKey, `{"kind": "echo"}`) // the rate's one unit

	// Decoded only after the rate is spent: 429, not 400.
	if got := statuses(f.batch(acmeKey, `{"kind": "Echo"}`)); got[0] != http.StatusTooManyRequests {
		t.Fatalf("an invalid item past the rate: %v, want 429", got)
	}

	item := `{"kind": "echo", "input": {"prompt": "` + strings.Repeat("x", 16_000) + `"}}`
	items := make([]string, 0, 1000)
	for len(items)*(len(item)+1) < httpapi.DefaultMaxBatchBody-len(item)-20 && len(items) < 1000 {
		items = append(items, item)
	}
	body := []byte(`{"jobs": [` + strings.Join(items, ",") + `]}`)
	const batches = 50
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop := peakHeap()
	var wg sync.WaitGroup
	codes := make([]int, batches)
	errs := make([]error, batches)
	for i := range batches {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, f.url+"/v1/jobs/batch", bytes.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			req.Header.Set("Authorization", "Bearer "+acmeKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := f.client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	peak := stop()
	counts := map[int]int{}
	for i, c := range codes {
		// A batch refused before its body was read may find the
		// connection closed while it still sends the body: refused too.
		if err := errs[i]; err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("batch %d: %v", i, err)
		}
		counts[c]++ // 0: cut off while sending
	}
	if counts[http.StatusOK]+counts[http.StatusTooManyRequests]+counts[0] != batches || counts[http.StatusOK] == 0 {
		t.Fatalf("statuses %v: want 200 (every item 429) or 429 (batches in flight)", counts)
	}
	grew := int64(peak) - int64(base.HeapAlloc)
	t.Logf("%d batches of %d bytes: %v; the heap grew by %d MiB at most", batches, len(body), counts, grew>>20)
	if grew > batchHeapBound {
		t.Errorf("the heap grew by %d MiB, more than the bound's %d MiB", grew>>20, batchHeapBound>>20)
	}
}

// batchHeapBound is the most the heap may grow under the batches above:
// the body the test sends from (16 MiB), and each batch body the API holds
// at once (DefaultMaxTenantBatches of 16 MiB, with its split items'
// slices), with room for the garbage a GC cycle has not swept yet.
const batchHeapBound = 128 << 20
