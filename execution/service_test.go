package execution_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testsignal"
	"github.com/leasehold/leasehold/job"
)

// Every service of a worker starts with its Run, and each is told apart by
// its signal; a job runs meanwhile, and Run returns once they have
// stopped (goleak checks that none is left).
func TestWorkerStartsEveryService(t *testing.T) {
	f := newFixture(t)
	var cfg execution.Config
	names := []string{execution.ServiceHeartbeats, execution.ServiceFinisher,
		execution.ServiceReaper, execution.ServiceCancelWatcher, execution.ServiceLimits}
	started := map[string]*testsignal.Signal{}
	for _, name := range names {
		started[name] = testsignal.New()
		cfg = execution.WithStartedSignal(cfg, name, started[name])
	}
	_, stop := f.startWorker(t, cfg, map[string]execution.Handler{"echo": echo})
	for _, name := range names {
		started[name].Wait(t, 5*time.Second)
	}
	j := f.submit(t, job.Submission{Kind: "echo", Input: raw(`"hi"`)})
	if got := f.waitState(t, j.ID, 5*time.Second, job.StateSucceeded, job.StateFailed); got.State != job.StateSucceeded {
		t.Fatalf("job %s, want succeeded", got.State)
	}
	stop()
}
