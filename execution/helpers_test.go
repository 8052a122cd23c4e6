package execution_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/cancel"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/lease"
)

// helpers are the roles a test can start this binary in as a subprocess
// (testenv.StartHelper): worker processes to kill and pause.
var helpers = map[string]func() int{
	"worker": workerProcess,
}

// Environment of the "worker" helper. Durations are Go duration strings.
const (
	envPrefix      = "LH_PREFIX"      // the fixture's key prefix (required)
	envSubject     = "LH_SUBJECT"     // the fixture's cancel subject (required)
	envMode        = "LH_MODE"        // handler mode, see workerHandler (required)
	envID          = "LH_WORKER_ID"   // worker id; default the worker's own
	envLeaseTTL    = "LH_LEASE_TTL"   // default 1s
	envHeartbeat   = "LH_HEARTBEAT"   // default 100ms
	envGrace       = "LH_GRACE"       // default 30s
	envConcurrency = "LH_CONCURRENCY" // default 32
	envRedis       = "LH_REDIS"       // address of a Redis of the test's own; default the parent's shared one
	envCluster     = "LH_CLUSTER"     // comma-separated masters of a Redis Cluster to use instead
	envQueues      = "LH_QUEUES"      // comma-separated queues; default the default queue
	envUpstream    = "LH_UPSTREAM"    // URL of the fake upstream the "upstream" handler calls
)

// faultKind is the job kind the helper worker serves.
const faultKind = "fault"

// workerProcess runs an execution.Worker on the parent's Redis and NATS
// until it is killed, or until SIGTERM, which shuts it down gracefully. It
// prints one line per thing the parent waits for:
//
//	ready <worker id>                       Run is about to start
//	started <job id> <token> <attempt>      a handler started
//	emit <job id> ok|refused|error <attempt> an Emit returned
//	stopped <job id> <cause>                a handler saw its context end
//	exited                                  Run returned
//
// and the worker's warnings, as slog text lines without the time
// (`level=WARN msg="finish refused: …" …`).
func workerProcess() int {
	out := &printer{}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "worker helper:", err)
		return 1
	}
	prefix, subject, mode := os.Getenv(envPrefix), os.Getenv(envSubject), os.Getenv(envMode)
	if prefix == "" || subject == "" || mode == "" {
		return fail(fmt.Errorf("%s, %s and %s are required", envPrefix, envSubject, envMode))
	}
	handler, err := workerHandler(mode, out)
	if err != nil {
		return fail(err)
	}
	ttl, err1 := envDuration(envLeaseTTL, time.Second)
	heartbeat, err2 := envDuration(envHeartbeat, 100*time.Millisecond)
	grace, err3 := envDuration(envGrace, 30*time.Second)
	concurrency, err4 := strconv.Atoi(cmp.Or(os.Getenv(envConcurrency), "32"))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return fail(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var rdb redis.UniversalClient
	if addrs := os.Getenv(envCluster); addrs != "" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	} else if addr := os.Getenv(envRedis); addr != "" {
		rdb = redis.NewClient(&redis.Options{Addr: addr})
	} else {
		rdb = testenv.HelperRedis()
	}
	defer rdb.Close()
	nc, err := nats.Connect(testenv.HelperNATSURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()

	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // lines start with level=, so the parent can match them
			}
			return a
		},
	}))
	var queues []string
	if q := os.Getenv(envQueues); q != "" {
		queues = strings.Split(q, ",")
	}
	w, err := execution.NewWorker(rdb, execution.Config{
		Prefix:        prefix,
		Queues:        queues,
		CancelSubject: subject,
		ID:            os.Getenv(envID),
		Concurrency:   concurrency,
		Heartbeat:     heartbeat,
		LeaseTTL:      ttl,
		ShutdownGrace: grace,
		Poll:          50 * time.Millisecond,
		Backoff:       func(int) time.Duration { return 10 * time.Millisecond },
		NATS:          nc,
		Logger:        logger,
	})
	if err != nil {
		return fail(err)
	}
	w.Handle(faultKind, handler)
	out.printf("ready %s", w.ID())
	if err := w.Run(ctx); err != nil {
		return fail(err)
	}
	out.printf("exited")
	return 0
}

// workerHandler returns the handler of a mode:
//
//	block  waits until its context ends, then fails with the cause.
//	stuck  waits until its context ends, says so, and never returns.
//	emit   on attempt 1, emits a progress event every 20ms, ignoring its
//	       context (a stubborn writer: only the fence can stop it), until an
//	       emit is refused; then waits for its context to end and returns a
//	       result, which its finish tries to record. A later attempt emits
//	       once and returns.
//	quick  works for up to 10ms, emits one progress event and returns; it
//	       prints no "emit ok" line, to keep the output of 10,000 jobs small.
//	upstream  holds its slot for one call to the fake upstream at
//	       $LH_UPSTREAM (see stress_test.go), which lasts the input's "ms",
//	       made under its context; then returns.
//
// Every event's data carries the execution's attempt and id.
func workerHandler(mode string, out *printer) (execution.Handler, error) {
	started := func(e *execution.Execution) {
		out.printf("started %s %d %d", e.JobID, uint64(e.Token()), e.Attempt())
	}
	emit := func(ctx context.Context, e *execution.Execution, seq int, quiet bool) error {
		// Detached from ctx: the write must reach Redis whether or not this
		// execution was told to stop, so that the fence is what refuses it.
		ectx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		err := e.Emit(ectx, execution.EventProgress, progress{Attempt: e.Attempt(), Exec: e.ID, Seq: seq})
		switch {
		case err == nil:
			if !quiet {
				out.printf("emit %s ok %d", e.JobID, e.Attempt())
			}
		case errors.Is(err, execution.ErrNotOwner):
			out.printf("emit %s refused %d", e.JobID, e.Attempt())
		default:
			out.printf("emit %s error %d %v", e.JobID, e.Attempt(), err)
		}
		return err
	}
	stopped := func(ctx context.Context, e *execution.Execution) {
		out.printf("stopped %s %s", e.JobID, causeName(context.Cause(ctx)))
	}
	switch mode {
	case "block":
		return func(ctx context.Context, e *execution.Execution) (any, error) {
			started(e)
			<-ctx.Done()
			stopped(ctx, e)
			return nil, context.Cause(ctx)
		}, nil
	case "stuck":
		return func(ctx context.Context, e *execution.Execution) (any, error) {
			started(e)
			<-ctx.Done()
			stopped(ctx, e)
			select {} // a handler that never returns: its worker keeps heartbeating for it
		}, nil
	case "emit":
		return func(ctx context.Context, e *execution.Execution) (any, error) {
			started(e)
			if e.Attempt() > 1 {
				_ = emit(ctx, e, 0, false)
				return progress{Attempt: e.Attempt(), Exec: e.ID}, nil
			}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for seq := 0; emit(ctx, e, seq, false) == nil; seq++ {
				<-tick.C
			}
			<-ctx.Done()
			stopped(ctx, e)
			return progress{Attempt: e.Attempt(), Exec: e.ID}, nil
		}, nil
	case "checkpoint":
		// Checkpoints its attempt every 20 ms, whatever its context says, as
		// a handler stuck in a long step would: the fence must refuse it.
		return func(ctx context.Context, e *execution.Execution) (any, error) {
			started(e)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				err := e.Checkpoint(cctx, progress{Attempt: e.Attempt(), Exec: e.ID})
				stop()
				switch {
				case err == nil:
					out.printf("checkpoint %s ok %d", e.JobID, e.Attempt())
				case errors.Is(err, execution.ErrNotOwner):
					out.printf("checkpoint %s refused %d", e.JobID, e.Attempt())
					<-ctx.Done()
					return nil, context.Cause(ctx)
				default:
					out.printf("checkpoint %s error %d %v", e.JobID, e.Attempt(), err)
				}
				<-tick.C
			}
		}, nil
	case "upstream":
		return func(ctx context.Context, e *execution.Execution) (any, error) {
			started(e)
			var in struct {
				MS int `json:"ms"`
			}
			if err := json.Unmarshal(e.Input, &in); err != nil {
				return nil, execution.Permanent(err)
			}
			if err := callUpstream(ctx, http.DefaultClient, os.Getenv(envUpstream), os.Getenv(envID), e.ID, in.MS); err != nil {
				if ctx.Err() == nil {
					return nil, err
				}
				stopped(ctx, e)
				return nil, context.Cause(ctx)
			}
			return progress{Attempt: e.Attempt(), Exec: e.ID}, nil
		}, nil
	case "quick":
		return func(ctx context.Context, e *execution.Execution) (any, error) {
			started(e)
			time.Sleep(rand.N(10 * time.Millisecond)) // its work: a window for kills and pauses to hit
			_ = emit(ctx, e, 0, true)
			return progress{Attempt: e.Attempt(), Exec: e.ID}, nil
		}, nil
	}
	return nil, fmt.Errorf("unknown handler mode %q", mode)
}

// progress is the data of the progress events handlers emit, and of their
// results.
type progress struct {
	Attempt int    `json:"attempt"`
	Exec    string `json:"exec"`
	Seq     int    `json:"seq,omitempty"`
}

// causeName is a one-word name for an execution context's cause.
func causeName(err error) string {
	switch {
	case errors.Is(err, lease.ErrLost):
		return "lost"
	case errors.Is(err, cancel.ErrRequested):
		return "cancelled"
	case errors.Is(err, execution.ErrShutdown):
		return "shutdown"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return strconv.Quote(fmt.Sprint(err))
}

// printer writes whole lines to stdout, one write each, so lines of
// concurrent handlers never interleave.
type printer struct{ mu sync.Mutex }

func (p *printer) printf(format string, args ...any) {
	_, _ = p.Write([]byte(fmt.Sprintf(format, args...) + "\n"))
}

func (p *printer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return os.Stdout.Write(b)
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
