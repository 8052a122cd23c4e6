package execution_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
)

// A Waker publishes on the wake subject of its prefix's queue; a Waker
// without NATS is nil and sends nothing.
func TestWakerWakesTheQueueOfItsPrefix(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t).Conn(t)
	prefix := testenv.Prefix(t)
	sub, err := nc.SubscribeSync(keys.New(prefix).WakeSubject("mail"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	execution.NewWaker(nc, prefix, nil).Wake(context.Background(), "mail")
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no wake-up on the queue's subject: %v", err)
	}

	none := execution.NewWaker(nil, prefix, nil)
	if none != nil {
		t.Fatalf("NewWaker(nil, ...) = %v, want nil", none)
	}
	none.Wake(context.Background(), "mail") // must not panic
}
