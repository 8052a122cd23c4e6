package execution

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
)

// Waker sends the wake-ups that follow a commit which may give an idle
// worker work: a submission, a retry, a signal that resumes a job, a
// schedule's fire, a job handed back or a slot freed. Every sender of
// them goes through a Waker. A nil Waker, or one without NATS, sends
// nothing: workers find the job when they poll.
type Waker struct {
	nc     *nats.Conn
	prefix string
	log    *slog.Logger
}

// NewWaker returns the Waker of the workers under prefix ("" for the
// default) on nc; nil when nc is nil. log gets a line at debug level for
// a wake-up not sent; nil is slog.Default().
func NewWaker(nc *nats.Conn, prefix string, log *slog.Logger) *Waker {
	if nc == nil {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	return &Waker{nc: nc, prefix: prefix, log: log}
}

// Wake tells one idle worker of queue that a job may be waiting there.
// A wake-up lost costs latency only, so it is never an error.
func (w *Waker) Wake(ctx context.Context, queue string) {
	if w == nil {
		return
	}
	if err := Wake(w.nc, w.prefix, queue); err != nil {
		w.log.DebugContext(ctx, "wake-up not sent; workers find the job when they poll", "queue", queue, "err", err)
	}
}
