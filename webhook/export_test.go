package webhook

import (
	"context"

	"github.com/leasehold/leasehold/internal/testsignal"
)

// RunOnce is runOnce, for tests of one read of the outboxes.
func (d *Drainer) RunOnce(ctx context.Context) (int, error) { return d.runOnce(ctx) }

// OnTry sets the signal fired after each try is recorded.
func (d *Drainer) OnTry(s *testsignal.Signal) { d.tried = s }
