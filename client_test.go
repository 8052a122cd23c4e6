package leasehold_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

// A Client runs its own kinds and the built-in ones, and cancels a running
// job the way the API does.
func TestClientRunsItsKindsAndCancels(t *testing.T) {
	t.Parallel()
	c, err := leasehold.NewClient(testenv.Redis(t).Client(t), leasehold.Config{Worker: execution.Config{
		Prefix: testenv.Prefix(t), NATS: testenv.NATS(t).Conn(t),
		Heartbeat: 50 * time.Millisecond, LeaseTTL: 500 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	c.Handle("wait", func(ctx context.Context, _ *execution.Execution) (any, error) {
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	})
	run(t, c)
	wait := func(id string, states ...job.State) job.Job {
		var j job.Job
		testenv.Eventually(t, 10*time.Second, func() bool {
			if j, err = c.Get(t.Context(), "acme", id); err != nil {
				t.Fatal(err)
			}
			return slices.Contains(states, j.State)
		}, "job %s never reached %v", id, states)
		return j
	}

	echo, err := c.Submit(t.Context(), "acme", job.Submission{Kind: "echo", Input: []byte(`{"hi":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if j := wait(echo.ID, job.StateSucceeded, job.StateFailed); string(j.Result) != `{"hi":1}` {
		t.Fatalf("echo: %s %s", j.State, j.Result)
	}

	long, err := c.Submit(t.Context(), "acme", job.Submission{Kind: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	wait(long.ID, job.StateRunning)
	if j, err := c.Cancel(t.Context(), "acme", long.ID); err != nil || !j.CancelRequested {
		t.Fatalf("cancel: %+v %v", j, err)
	}
	if cause := <-stopped; !errors.Is(cause, cancel.ErrRequested) {
		t.Fatalf("handler stopped by %v, want a cancel", cause)
	}
	wait(long.ID, job.StateCancelled)
	if _, err := c.Cancel(t.Context(), "acme", echo.ID); !errors.Is(err, job.ErrConflict) {
		t.Fatal("cancel of a succeeded job: no error, want job.ErrConflict")
	}
}

// A Client creates, reads, pauses, triggers and deletes schedules.
func TestClientSchedules(t *testing.T) {
	t.Parallel()
	c, err := leasehold.NewClient(testenv.Redis(t).Client(t), leasehold.Config{Worker: execution.Config{Prefix: testenv.Prefix(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	spec := schedule.Spec{Name: "digest", Cron: "0 3 * * *", Timezone: "Europe/Berlin", Job: job.Submission{Kind: "echo"}}
	if _, created, err := c.CreateSchedule(ctx, "acme", spec); err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if s, err := c.PauseSchedule(ctx, "acme", "digest"); err != nil || !s.Paused {
		t.Fatalf("pause: %+v %v", s, err)
	}
	j, err := c.TriggerSchedule(ctx, "acme", "digest")
	if err != nil || j.Schedule == nil || *j.Schedule != "digest" {
		t.Fatalf("trigger: %+v %v", j, err)
	}
	if s, err := c.ResumeSchedule(ctx, "acme", "digest"); err != nil || s.Paused || *s.LastJobID != j.ID {
		t.Fatalf("resume: %+v %v", s, err)
	}
	if list, next, err := c.Schedules(ctx, "acme", 0, ""); err != nil || len(list) != 1 || next != "" {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := c.DeleteSchedule(ctx, "acme", "digest"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, "acme", "digest"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// run runs c until the test ends.
func run(t *testing.T, c *leasehold.Client) {
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// A Client submits a batch: each item on its own, in order, and the jobs
// it created run.
func TestClientSubmitsABatch(t *testing.T) {
	t.Parallel()
	c, err := leasehold.NewClient(testenv.Redis(t).Client(t), leasehold.Config{Worker: execution.Config{
		Prefix: testenv.Prefix(t), NATS: testenv.NATS(t).Conn(t),
	}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	res, err := c.SubmitBatch(t.Context(), "acme", []job.BatchItem{
		{Submission: job.Submission{Kind: "echo", Input: []byte(`{"n":1}`)}, IdempotencyKey: "one"},
		{Submission: job.Submission{Kind: "Echo"}},
		{Submission: job.Submission{Kind: "echo", Input: []byte(`{"n":1}`)}, IdempotencyKey: "one"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var invalid *job.ValidationError
	if !res[0].Created || !errors.As(res[1].Err, &invalid) || res[2].Created || res[2].Job.ID != res[0].Job.ID {
		t.Fatalf("results %+v", res)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		j, err := c.Get(t.Context(), "acme", res[0].Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j.State == job.StateSucceeded && string(j.Result) == `{"n":1}`
	}, "the batch's job never succeeded")
}

// A job the Client cancels before it runs is kept for the worker's
// retention, as a job its worker ends is, not for the default.
func TestClientCancelKeepsTheConfiguredRetention(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	prefix := testenv.Prefix(t)
	const retention = 48 * time.Hour // at least the idempotency TTL; the default is 7 days
	c, err := leasehold.NewClient(rdb, leasehold.Config{Worker: execution.Config{Prefix: prefix, Retention: retention}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Submit(t.Context(), "acme", job.Submission{Kind: "echo", Delay: job.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if j, err = c.Cancel(t.Context(), "acme", j.ID); err != nil || j.State != job.StateCancelled {
		t.Fatalf("cancel: %+v, %v", j, err)
	}
	ms, err := rdb.ZScore(t.Context(), keys.New(prefix).QueueRetired(j.Queue), j.ID).Result()
	if err != nil {
		t.Fatalf("the cancelled job is not among the queue's retired jobs: %v", err)
	}
	if until := time.UnixMilli(int64(ms)); until.Before(before.Add(retention-time.Minute)) || until.After(time.Now().Add(retention+time.Minute)) {
		t.Errorf("the cancelled job is kept until %v, want %v after the cancel", until, retention)
	}
}
