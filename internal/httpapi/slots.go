package httpapi

import (
	"errors"
	"sync"
)

var (
	// errTooManyStreams is a tenant over its cap of event streams and
	// ?wait= requests: 429.
	errTooManyStreams = errors.New("httpapi: tenant over its cap of event streams and waits")
	// errTooManyBatches is a tenant with as many batch bodies in this
	// process as it may hold: 429.
	errTooManyBatches = errors.New("httpapi: tenant over its cap of batches in flight")
	// errBatchesFull is this process holding as many batch bodies as it
	// may, of any tenants: 503.
	errBatchesFull = errors.New("httpapi: too many batches in flight")
)

// slots counts what each tenant holds of a resource in this process: one
// tenant at most perTenant (else tenantFull), all of them at most all
// when all is above 0 (else allFull). The API bounds two such resources:
//   - event streams and ?wait= requests: each holds a Redis connection in
//     XREAD BLOCK for as long as it lasts, so without a cap one tenant
//     could hold every connection the process may open;
//   - batch bodies, each up to MaxBatchBody bytes read whole before its
//     items are split: without a bound, concurrent batches could take the
//     process's memory. A slot is taken before the body is read.
type slots struct {
	perTenant, all      int
	tenantFull, allFull error
	mu                  sync.Mutex
	held                map[string]int
	n                   int
}

func newSlots(perTenant, all int, tenantFull, allFull error) *slots {
	return &slots{perTenant: perTenant, all: all, tenantFull: tenantFull, allFull: allFull, held: map[string]int{}}
}

// take reserves one slot for tenant; release it with give.
func (s *slots) take(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.held[tenant] >= s.perTenant:
		return s.tenantFull
	case s.all > 0 && s.n >= s.all:
		return s.allFull
	}
	s.held[tenant]++
	s.n++
	return nil
}

func (s *slots) give(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.held[tenant]--; s.held[tenant] == 0 {
		delete(s.held, tenant)
	}
}
