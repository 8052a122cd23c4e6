// Package kinds holds the job kinds every Leasehold worker serves out of
// the box: llm.chat, which streams a chat completion from an
// OpenAI-compatible upstream, and echo and sleep, for trying the system and
// for diagnosing it.
package kinds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
)

// Register adds every built-in kind to w. client makes sleep's notify
// calls; nil means http.DefaultClient. llm configures llm.chat; its zero
// value registers a kind that fails every job, saying no upstream is set.
func Register(w *execution.Worker, client *http.Client, llm LLMConfig) {
	if client == nil {
		client = http.DefaultClient
	}
	w.Handle("echo", Echo)
	w.Handle("sleep", Sleep(client))
	w.Handle("llm.chat", LLMChat(llm))
}

// Echo returns its input as its result.
func Echo(_ context.Context, e *execution.Execution) (any, error) {
	return e.Input, nil
}

// SleepInput is the input of the sleep kind.
type SleepInput struct {
	Duration     string `json:"duration"`      // how long to sleep; default 5s
	Tick         string `json:"tick"`          // how often to emit progress; default 1s
	FailAttempts int    `json:"fail_attempts"` // the first N attempts fail after sleeping
	NotifyURL    string `json:"notify_url"`    // POSTed to every tick, with the fencing token
}

// Sleep returns the sleep kind: it sleeps, emits a progress event every
// tick, POSTs {"job", "execution", "tick"} with a Fencing-Token header to
// notify_url every tick if set, and fails its first fail_attempts
// attempts. It stops at once when its context ends.
func Sleep(client *http.Client) execution.Handler {
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		in, err := parseSleep(e.Input)
		if err != nil {
			return nil, execution.Permanent(err)
		}
		duration, _ := time.ParseDuration(in.Duration)
		tick, _ := time.ParseDuration(in.Tick)
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		deadline := time.NewTimer(duration)
		defer deadline.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-deadline.C:
				if e.Attempt() <= in.FailAttempts {
					return nil, fmt.Errorf("sleep: failing attempt %d of the first %d, as asked", e.Attempt(), in.FailAttempts)
				}
				return map[string]any{"slept": duration.String(), "ticks": n - 1}, nil
			case <-ticker.C:
			}
			if err := e.Emit(ctx, execution.EventProgress, map[string]int{"tick": n}); err != nil {
				return nil, err
			}
			if in.NotifyURL != "" {
				if err := notify(ctx, client, in.NotifyURL, e, n); err != nil {
					return nil, err
				}
			}
		}
	}
}

func parseSleep(raw json.RawMessage) (SleepInput, error) {
	in := SleepInput{Duration: "5s", Tick: "1s"}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, fmt.Errorf("sleep: input: %w", err)
		}
	}
	d, err := time.ParseDuration(in.Duration)
	if err != nil || d < 0 {
		return in, fmt.Errorf("sleep: duration %q: want a non-negative Go duration", in.Duration)
	}
	t, err := time.ParseDuration(in.Tick)
	if err != nil || t <= 0 {
		return in, fmt.Errorf("sleep: tick %q: want a positive Go duration", in.Tick)
	}
	if in.FailAttempts < 0 {
		return in, errors.New("sleep: fail_attempts must not be negative")
	}
	return in, nil
}

// notify POSTs one tick to url as the execution's owner; a 409 from a
// fenced downstream means a newer execution owns the job.
func notify(ctx context.Context, client *http.Client, url string, e *execution.Execution, tick int) error {
	body, _ := json.Marshal(map[string]any{"job": e.JobID, "execution": e.ID, "tick": tick})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return execution.Permanent(fmt.Errorf("sleep: notify_url: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	fencing.SetHeader(req.Header, e.Token())
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("sleep: notify: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		return fmt.Errorf("sleep: notify: %w", fencing.ErrStale)
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("sleep: notify: %s", resp.Status)
	}
	return nil
}
