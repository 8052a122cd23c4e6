// Package kinds holds the job kinds every Leasehold worker serves out of
// the box: llm.chat, which streams a chat completion from an
// OpenAI-compatible upstream, and echo and sleep, for trying the system and
// for diagnosing it.
package kinds

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/job"
)

// Register adds every built-in kind to w. sleep configures sleep's notify
// calls. llm configures llm.chat; its zero value registers a kind that
// fails every job, saying no upstream is set.
func Register(w *execution.Worker, sleep SleepConfig, llm LLMConfig) {
	w.Handle("echo", Echo)
	w.Handle("sleep", Sleep(sleep))
	w.Handle("llm.chat", LLMChat(llm))
}

// Echo returns its input as its result.
func Echo(_ context.Context, e *execution.Execution) (any, error) {
	return e.Input, nil
}

// MinTick is the shortest tick a sleep job may ask for: each tick is a
// Redis write, and a job may sleep for hours.
const MinTick = 100 * time.Millisecond

// SleepInput is the input of the sleep kind.
type SleepInput struct {
	Duration     string `json:"duration"`      // how long to sleep; default 5s
	Tick         string `json:"tick"`          // how often to emit progress; default 1s, at least MinTick
	FailAttempts int    `json:"fail_attempts"` // the first N attempts fail after sleeping
	NotifyURL    string `json:"notify_url"`    // POSTed to every tick, with the fencing token; must be allowed (NotifyAllow)
	// WaitFor makes the first execution wait for the signal of that name
	// (execution.Wait) before it sleeps; the result is then the signal's
	// {"signal": data, "timed_out": bool}.
	WaitFor     string `json:"wait_for"`
	WaitTimeout string `json:"wait_timeout"` // the wait's timeout; default 1h
	// Resume saves the tick count as the checkpoint at every tick, and a
	// re-run goes on from the tick after it, for the time left.
	Resume bool `json:"resume"`
}

// sleepCheckpoint is the checkpoint of a sleep job with resume.
type sleepCheckpoint struct {
	Tick int `json:"tick"`
}

// SleepConfig configures the sleep kind.
type SleepConfig struct {
	// Client makes the notify calls; default http.DefaultClient. It is
	// used with redirects turned off, whatever its CheckRedirect says.
	Client *http.Client
	// Allow lists where notify_url may point; default nowhere.
	Allow NotifyAllow
	// Logger receives why a notify call failed, which the job's error does
	// not show; default slog.Default().
	Logger *slog.Logger
}

// InputError is a field of a job's input that its kind refuses.
type InputError struct {
	Field   string // as the submit request names it: "input.tick"
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

// ValidateInput checks the input of a job of a built-in kind (sleep,
// llm.chat) as its handler will, with the handler's own parser, so that
// the API refuses at submit (400) what would fail anyway. It returns an
// *InputError, or nil; other kinds pass.
func ValidateInput(kind string, input json.RawMessage, allow NotifyAllow) error {
	var err error
	switch kind {
	case "sleep":
		_, err = parseSleep(input, allow)
	case "llm.chat":
		_, err = parseChat(input)
	}
	return err
}

// Sleep returns the sleep kind: it sleeps, emits a progress event
// {"tick", "done", "total"} every tick, POSTs {"job", "execution", "tick"} with a Fencing-Token header to
// notify_url every tick if set, and fails its first fail_attempts
// attempts. It stops at once when its context ends. With wait_for its
// first execution waits for that signal (wait_timeout, default 1h), and
// the job then sleeps and succeeds with {"signal": data, "timed_out"};
// with resume each tick saves its count as the checkpoint, and a re-run
// goes on from the tick after it.
//
// notify_url is checked against cfg.Allow before every call, and no
// redirect is followed: a job's input must not make the worker reach what
// the operator did not allow (the metadata service, an internal admin
// port). Why a call failed goes to the log, never into the job's error,
// which its tenant reads: a transport error can quote what the far end
// sent.
func Sleep(cfg SleepConfig) execution.Handler {
	client := *cmp.Or(cfg.Client, http.DefaultClient)
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	log := cmp.Or(cfg.Logger, slog.Default())
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		in, err := parseSleep(e.Input, cfg.Allow)
		if err != nil {
			return nil, execution.Permanent(fmt.Errorf("sleep: %w", err))
		}
		duration, _ := time.ParseDuration(in.Duration)
		tick, _ := time.ParseDuration(in.Tick)
		resume := e.Resume()
		sig := resume.Signal
		if in.WaitFor != "" && (sig == nil || sig.Name != in.WaitFor) {
			timeout, _ := time.ParseDuration(in.WaitTimeout)
			return nil, execution.Wait(in.WaitFor, timeout)
		}
		done := 0 // ticks done by the executions before
		if in.Resume && resume.Checkpoint != nil {
			var cp sleepCheckpoint
			if json.Unmarshal(resume.Checkpoint, &cp) == nil {
				done = max(cp.Tick, 0)
			}
		}
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		deadline := time.NewTimer(max(duration-time.Duration(done)*tick, 0))
		defer deadline.Stop()
		for n := done + 1; ; n++ {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-deadline.C:
				if e.Attempt() <= in.FailAttempts {
					return nil, fmt.Errorf("sleep: failing attempt %d of the first %d, as asked", e.Attempt(), in.FailAttempts)
				}
				if in.WaitFor != "" {
					return map[string]any{"signal": sig.Data, "timed_out": sig.TimedOut}, nil
				}
				return map[string]any{"slept": duration.String(), "ticks": n - 1}, nil
			case <-ticker.C:
			}
			// done and total let a client draw a bar (leasehold watch does).
			progress := map[string]int{"tick": n, "done": n, "total": int(duration / tick)}
			if err := e.Emit(ctx, execution.EventProgress, progress); err != nil {
				return nil, err
			}
			if in.NotifyURL != "" {
				if err := notify(ctx, &client, in.NotifyURL, e, n); err != nil {
					if ctx.Err() == nil {
						log.WarnContext(ctx, "sleep: notify failed", "job_id", e.JobID, "execution_id", e.ID, "err", err)
					}
					return nil, publicNotifyError(err)
				}
			}
			if in.Resume {
				if err := e.Checkpoint(ctx, sleepCheckpoint{Tick: n}); err != nil {
					return nil, err
				}
			}
		}
	}
}

func parseSleep(raw json.RawMessage, allow NotifyAllow) (SleepInput, error) {
	in := SleepInput{Duration: "5s", Tick: "1s", WaitTimeout: "1h"}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, &InputError{Field: "input", Message: err.Error()}
		}
	}
	d, err := time.ParseDuration(in.Duration)
	if err != nil || d < 0 {
		return in, &InputError{Field: "input.duration", Message: fmt.Sprintf("%q: want a non-negative Go duration", in.Duration)}
	}
	t, err := time.ParseDuration(in.Tick)
	if err != nil || t < MinTick {
		return in, &InputError{Field: "input.tick", Message: fmt.Sprintf("%q: want a Go duration of at least %v", in.Tick, MinTick)}
	}
	if in.FailAttempts < 0 {
		return in, &InputError{Field: "input.fail_attempts", Message: "must not be negative"}
	}
	if in.WaitFor != "" && job.ValidateSignalName(in.WaitFor) != nil {
		return in, &InputError{Field: "input.wait_for", Message: "must be a signal name, matching ^[a-z0-9][a-z0-9_.:-]{0,63}$"}
	}
	if w, err := time.ParseDuration(in.WaitTimeout); err != nil || w <= 0 {
		return in, &InputError{Field: "input.wait_timeout", Message: fmt.Sprintf("%q: want a positive Go duration", in.WaitTimeout)}
	}
	if in.NotifyURL != "" && !allow.Allows(in.NotifyURL) {
		return in, &InputError{Field: "input.notify_url", Message: "is not among the URL prefixes this service allows (LEASEHOLD_NOTIFY_ALLOW)"}
	}
	return in, nil
}

// errNotify is what a job's error says of a notify call that failed.
var errNotify = errors.New("sleep: notify_url: the call failed")

// publicNotifyError keeps the cause of a failed notify call out of the
// job's error, except a fencing refusal, which is the call's meaning.
func publicNotifyError(err error) error {
	if errors.Is(err, fencing.ErrStale) {
		return fmt.Errorf("sleep: notify: %w", fencing.ErrStale)
	}
	return errNotify
}

// notify POSTs one tick to url as the execution's owner; a 409 from a
// fenced downstream means a newer execution owns the job.
func notify(ctx context.Context, client *http.Client, url string, e *execution.Execution, tick int) error {
	body, _ := json.Marshal(map[string]any{"job": e.JobID, "execution": e.ID, "tick": tick})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	fencing.SetHeader(req.Header, e.Token())
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		return fencing.ErrStale
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
