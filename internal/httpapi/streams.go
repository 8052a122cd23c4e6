package httpapi

import (
	"errors"
	"sync"
)

// errTooManyStreams is a tenant over its cap of event streams and ?wait=
// requests: 429.
var errTooManyStreams = errors.New("httpapi: tenant over its cap of event streams and waits")

// streamSlots counts each tenant's event streams and ?wait= requests in
// this process. Each holds a Redis connection in XREAD BLOCK for as long
// as it lasts, so without a cap one tenant could hold every connection
// the process may open.
type streamSlots struct {
	max  int
	mu   sync.Mutex
	held map[string]int
}

// take reserves one of tenant's slots; release it with give.
func (s *streamSlots) take(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[tenant] >= s.max {
		return errTooManyStreams
	}
	s.held[tenant]++
	return nil
}

func (s *streamSlots) give(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[tenant]--; s.held[tenant] == 0 {
		delete(s.held, tenant)
	}
}
