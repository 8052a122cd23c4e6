package job_test

import (
	"testing"

	"github.com/leasehold/leasehold/job"
)

func TestStateTerminal(t *testing.T) {
	t.Parallel()
	for s, want := range map[job.State]bool{
		job.StateQueued: false, job.StateRunning: false, job.StateRetrying: false, job.StateWaiting: false,
		job.StateSucceeded: true, job.StateFailed: true, job.StateCancelled: true, job.StateExpired: true,
	} {
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v", s, !want)
		}
	}
}
