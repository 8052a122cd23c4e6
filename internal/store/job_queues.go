package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/internal/store/keys"
)

// nameAgainAfter is how long a Store trusts that a queue it named is in the
// set of queues, and reads the set again: a queue's name lost with a
// Redis failover's last writes comes back within it.
const nameAgainAfter = time.Minute

// queueSet is a Store's view of the set of queues: the names it added
// lately, which a submit need not add again, and the names by tag, which
// say where the job of an id is (internal/jobid).
type queueSet struct {
	rdb  redis.UniversalClient
	keys keys.Space

	mu    sync.Mutex
	named map[string]time.Time // queue → when this Store last added it
	byTag map[uint16][]string  // as last read
}

// add adds queues to the set, those not added by this Store in the last
// nameAgainAfter: before their jobs, so a job is never in a queue the set
// lacks. It is idempotent: a crash after it leaves nothing a client can
// see.
func (q *queueSet) add(ctx context.Context, queues []string) error {
	now := time.Now()
	q.mu.Lock()
	fresh := slices.DeleteFunc(slices.Clone(queues), func(name string) bool {
		at, ok := q.named[name]
		return ok && now.Sub(at) < nameAgainAfter
	})
	q.mu.Unlock()
	if len(fresh) == 0 {
		return nil
	}
	if err := q.rdb.SAdd(ctx, q.keys.Queues(), anys(fresh)...).Err(); err != nil {
		return fmt.Errorf("job: name queues %v: %w", fresh, err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.named == nil {
		q.named = map[string]time.Time{}
	}
	for _, name := range fresh {
		q.named[name] = now
	}
	return nil
}

// cached returns the queues whose tag is tag, in the set as last read.
func (q *queueSet) cached(tag uint16) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byTag[tag]
}

// tagged returns the queues whose tag is tag, in the set as read now.
func (q *queueSet) tagged(ctx context.Context, tag uint16) ([]string, error) {
	all, err := q.rdb.SMembers(ctx, q.keys.Queues()).Result()
	if err != nil {
		return nil, fmt.Errorf("job: queues: %w", err)
	}
	byTag := make(map[uint16][]string, len(all))
	for _, name := range all {
		t := jobid.Tag(name)
		byTag[t] = append(byTag[t], name)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.byTag = byTag
	return slices.Clone(byTag[tag]), nil
}
