package store

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	webhookTakeScript   = scripts.Load("webhook_take.lua", transitionLib...)
	webhookRecordScript = scripts.Load("webhook_record.lua", transitionLib...)
)

// DueWebhooks returns up to n members ("<tenant>/<job id>") of queue's
// webhook outbox that are due by this process's clock, the first due
// first. TakeWebhooks checks them again on the Redis clock.
func (s *Store) DueWebhooks(ctx context.Context, queue string, n int) ([]string, error) {
	members, err := s.rdb.ZRangeByScore(ctx, s.keys.QueueWebhooks(queue), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: int64(n),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("store: due webhooks of %s: %w", queue, err)
	}
	return members, nil
}

// TakeWebhooksParams names the deliveries of a queue's outbox to take.
type TakeWebhooksParams struct {
	Queue string
	// Try are the members to take to try now, each held for Hold; Defer
	// the members to leave at the head of the outbox for DeferFor,
	// untried (their tenants' tries are all busy).
	Try, Defer     []string
	Hold, DeferFor time.Duration
}

// TakenWebhook is a delivery taken to try.
type TakenWebhook struct {
	Member, JobID string
	// Record is the fields of its job's record (the hash, its folded
	// fields merged in), for job.ParseRecord.
	Record map[string]string
}

// TakeWebhooks takes p.Try's deliveries that are still due and whose jobs
// have ended, and defers p.Defer's, in one script. A delivery not due any
// more (another drainer took it), or dropped (its job is gone or was
// retried), is left out.
func (s *Store) TakeWebhooks(ctx context.Context, p TakeWebhooksParams) ([]TakenWebhook, error) {
	members := append(append([]string(nil), p.Try...), p.Defer...)
	if len(members) == 0 {
		return nil, nil
	}
	keys := make([]string, 1, 1+2*len(members))
	keys[0] = s.keys.QueueWebhooks(p.Queue)
	args := make([]any, 3, 3+2*len(members))
	args[0], args[1], args[2] = p.Hold.Milliseconds(), p.DeferFor.Milliseconds(), len(members)
	for i, m := range members {
		_, id, _ := strings.Cut(m, "/")
		keys = append(keys, s.keys.Job(p.Queue, id), s.keys.JobFolded(p.Queue, id))
		try := "0" // deferred
		if i < len(p.Try) {
			try = "1"
		}
		args = append(args, m, try)
	}
	res, err := webhookTakeScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err == nil && len(res) != len(members) {
		err = fmt.Errorf("%d replies for %d deliveries", len(res), len(members))
	}
	if err != nil {
		return nil, fmt.Errorf("store: take webhooks of %s: %w", p.Queue, err)
	}
	var out []TakenWebhook
	for i, r := range res {
		h, _ := r.([]any)
		if len(h) == 0 {
			continue
		}
		_, id, _ := strings.Cut(members[i], "/")
		out = append(out, TakenWebhook{Member: members[i], JobID: id, Record: hashReply(h)})
	}
	return out, nil
}

// hashReply reads an HGETALL reply.
func hashReply(h []any) map[string]string {
	out := make(map[string]string, len(h)/2)
	for i := 0; i+1 < len(h); i += 2 {
		k, _ := h[i].(string)
		v, _ := h[i+1].(string)
		out[k] = v
	}
	return out
}

// WebhookTry is one try of a delivery to record.
type WebhookTry struct {
	Queue, Member, JobID string
	WebhookID            string // the delivery's id (webhook-id)
	// State is the delivery's state after the try: "pending" (tried again
	// after Backoff), "delivered" or "failed".
	State   string
	Backoff time.Duration
	Try     []byte // the try, JSON {at, status, error}
	Keep    int    // the tries a delivery keeps
}

// RecordWebhookTry records a try and what comes next, and returns the
// delivery's attempts after it: 0 when it is not the job's current
// delivery or no longer pending, and nothing changed.
func (s *Store) RecordWebhookTry(ctx context.Context, t WebhookTry) (attempts int, err error) {
	attempts, err = webhookRecordScript.Run(ctx, s.rdb,
		[]string{s.keys.QueueWebhooks(t.Queue), s.keys.Job(t.Queue, t.JobID), s.keys.JobFolded(t.Queue, t.JobID)},
		t.Member, t.WebhookID, t.State, t.Backoff.Milliseconds(), t.Try, t.Keep).Int()
	if err != nil {
		return 0, fmt.Errorf("store: record a webhook try: %w", err)
	}
	return attempts, nil
}

// WebhookNames returns the key of the opaque worker names that delivered
// job objects carry, the first caller making it.
func (s *Store) WebhookNames(ctx context.Context) ([]byte, error) {
	key := make([]byte, 32)
	crand.Read(key)
	old, err := s.rdb.SetArgs(ctx, s.keys.WebhookNames(), key, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return key, nil
	case err != nil:
		return nil, fmt.Errorf("store: webhook names key: %w", err)
	}
	return []byte(old), nil
}

// WebhookOutbox is what a queue's webhook outbox holds now.
type WebhookOutbox struct {
	Oldest     time.Time // the due time of its first delivery; zero when empty
	Deliveries int64     // not yet delivered or failed
}

// WebhookOutboxes reads the outboxes of queues in one round trip.
func (s *Store) WebhookOutboxes(ctx context.Context, queues []string) ([]WebhookOutbox, error) {
	heads := make([]*redis.ZSliceCmd, len(queues))
	sizes := make([]*redis.IntCmd, len(queues))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			outbox := s.keys.QueueWebhooks(q)
			heads[i], sizes[i] = p.ZRangeWithScores(ctx, outbox, 0, 0), p.ZCard(ctx, outbox)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: webhook outboxes: %w", err)
	}
	out := make([]WebhookOutbox, len(queues))
	for i := range queues {
		if head := heads[i].Val(); len(head) > 0 {
			out[i].Oldest = time.UnixMilli(int64(head[0].Score))
		}
		out[i].Deliveries = sizes[i].Val()
	}
	return out, nil
}
