package httpapi

import (
	"errors"
	"sync"
)

var (
	// errTooManyBatches is a tenant with as many batch bodies in this
	// process as it may hold.
	errTooManyBatches = errors.New("httpapi: tenant over its cap of batches in flight")
	// errBatchesFull is this process holding as many batch bodies as it
	// may, of any tenants.
	errBatchesFull = errors.New("httpapi: too many batches in flight")
)

// batchSlots bounds the batch bodies this process holds at once. Each is
// up to MaxBatchBody bytes, read whole before its items are split, so
// without a bound concurrent batches could take the process's memory; a
// slot is taken before the body is read. One tenant holds at most
// perTenant, so it cannot take the others' slots; all of them at most all.
type batchSlots struct {
	perTenant, all int
	mu             sync.Mutex
	held           map[string]int
	n              int
}

// take reserves one slot for tenant; release it with give.
func (b *batchSlots) take(tenant string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.held[tenant] >= b.perTenant:
		return errTooManyBatches
	case b.n >= b.all:
		return errBatchesFull
	}
	b.held[tenant]++
	b.n++
	return nil
}

func (b *batchSlots) give(tenant string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n--
	if b.held[tenant]--; b.held[tenant] == 0 {
		delete(b.held, tenant)
	}
}
