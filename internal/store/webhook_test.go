package store

import (
	"bytes"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The outboxes read back their head and size; a delivery whose job is
// gone is dropped by the take, not tried; a try of a delivery that is not
// the job's current one changes nothing; the names key is made once.
func TestWebhookOutboxOperations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := ownRedisStore(t)
	due := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	outbox := s.keys.QueueWebhooks("mail")
	if err := s.rdb.ZAdd(ctx, outbox, redis.Z{Score: float64(due.UnixMilli()), Member: "acme/gone"},
		redis.Z{Score: float64(due.Add(time.Second).UnixMilli()), Member: "beta/later"}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.WebhookOutboxes(ctx, []string{"mail", "empty"})
	if err != nil || len(got) != 2 || !got[0].Oldest.Equal(due) || got[0].Deliveries != 2 || !got[1].Oldest.IsZero() || got[1].Deliveries != 0 {
		t.Fatalf("outboxes: %+v, %v", got, err)
	}
	members, err := s.DueWebhooks(ctx, "mail", 1)
	if err != nil || len(members) != 1 || members[0] != "acme/gone" {
		t.Fatalf("due: %v, %v", members, err)
	}
	taken, err := s.TakeWebhooks(ctx, TakeWebhooksParams{Queue: "mail", Try: members, Hold: time.Minute, DeferFor: time.Second})
	if err != nil || len(taken) != 0 {
		t.Fatalf("take of a delivery whose job is gone: %+v, %v", taken, err)
	}
	if n, err := s.rdb.ZScore(ctx, outbox, "acme/gone").Result(); err != redis.Nil {
		t.Fatalf("the delivery of a job gone is still in the outbox (score %v, %v)", n, err)
	}
	n, err := s.RecordWebhookTry(ctx, WebhookTry{Queue: "mail", Member: "beta/later", JobID: "later", WebhookID: "w1",
		State: "delivered", Try: []byte(`{"at":"2026-01-01T00:00:00Z","status":200}`), Keep: 20})
	if err != nil || n != 0 {
		t.Fatalf("record of no current delivery: %d, %v", n, err)
	}

	first, err := s.WebhookNames(ctx)
	if err != nil || len(first) != 32 {
		t.Fatalf("names key: %x, %v", first, err)
	}
	if again, err := s.WebhookNames(ctx); err != nil || !bytes.Equal(again, first) {
		t.Fatalf("names key read again: %x, want %x (%v)", again, first, err)
	}
}
