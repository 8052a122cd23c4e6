package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/job"
)

// Exit codes of a watched job (watch, submit --watch), so a script can
// branch on how it ended. Any other failure exits 1; a bad command line 2.
const (
	exitSucceeded = 0
	exitFailed    = 3
	exitCancelled = 4
	exitExpired   = 5
)

// endedError is a watched job that ended otherwise than succeeded: its
// exit code says how.
type endedError struct {
	id    string
	state string
}

func (e *endedError) Error() string { return "job " + e.id + " ended " + e.state }

func (e *endedError) code() int {
	switch e.state {
	case "cancelled":
		return exitCancelled
	case "expired":
		return exitExpired
	}
	return exitFailed
}

// reconnectFor is how long watch keeps reconnecting after a dropped
// stream before it gives up.
const reconnectFor = time.Minute

// leasehold watch JOB_ID
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("watch", stdout, stderr)
	pos, err := c.parse(args, 1, "JOB_ID")
	if err != nil {
		return err
	}
	return watchJob(ctx, c, pos[0])
}

// sse is one server-sent event.
type sse struct {
	id, event string
	data      []byte
}

// watcher follows one job's event stream and shows it: output text on
// stdout as it arrives; states, progress and logs on stderr (with -o json,
// every event as a JSON line on stdout).
type watcher struct {
	c      *command
	id     string
	last   string  // the last event id seen: where a reconnect resumes
	state  string  // the last state seen
	ended  bool    // the last state event seen is terminal
	bar    bool    // a progress bar is drawn on stderr's current line
	isTerm bool    // stderr is a terminal: redraw the bar in place
	job    job.Job // the job as its last state event showed it
	// shared says that stdout and stderr reach one place (a terminal, a
	// 2>&1), where a line on stderr must not continue output text that
	// ended mid-line (midLine).
	shared, midLine bool
}

// watchJob follows job id until it ends, reconnecting with Last-Event-ID
// when the stream drops, and returns nil when it succeeded, an
// *endedError when it ended otherwise.
func watchJob(ctx context.Context, c *command, id string) error {
	w := &watcher{c: c, id: id, isTerm: isTerminal(c.stderr), shared: sameFile(c.stdout, c.stderr)}
	failing := time.Time{} // when the stream began to fail
	backoff := 100 * time.Millisecond
	for {
		progressed, err := w.follow(ctx)
		if w.ended {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if apiErr := (*apiError)(nil); errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable && apiErr.Status != http.StatusTooManyRequests {
			return err // not found, no key: reconnecting will not help
		}
		if progressed || failing.IsZero() {
			failing, backoff = time.Now(), 100*time.Millisecond
		}
		if time.Since(failing) > reconnectFor {
			return fmt.Errorf("watch %s: the stream keeps failing: %w", id, err)
		}
		w.endBar()
		if !c.json() {
			fmt.Fprintf(c.stderr, "stream dropped (%v); resuming after event %s\n", errOrEOF(err), w.last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	w.endBar()
	if !c.json() {
		line := fmt.Sprintf("job %s %s", id, w.state)
		if w.state != "succeeded" && w.job.Error != nil {
			line += ": " + w.job.Error.Error()
		}
		fmt.Fprintln(c.stderr, line)
	}
	if w.state == "succeeded" {
		return nil
	}
	return &endedError{id: id, state: w.state}
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// follow reads one connection of the stream, after w.last, until it ends;
// progressed says whether it brought any event.
func (w *watcher) follow(ctx context.Context) (progressed bool, err error) {
	req, err := w.c.request(ctx, http.MethodGet, "/v1/jobs/"+escape(w.id)+"/events", nil)
	if err != nil {
		return false, err
	}
	if w.last != "" {
		req.Header.Set("Last-Event-ID", w.last)
	}
	resp, err := w.c.do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return false, problemOf(resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	var e sse
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return progressed, err // io.EOF: the server ended the stream
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if e.event != "" || e.data != nil {
				if err := w.show(e); err != nil {
					return progressed, err
				}
				progressed = true
				if e.id != "" {
					w.last = e.id
				}
			}
			e = sse{}
		case strings.HasPrefix(line, ":"): // a keep-alive
		default:
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "id":
				e.id = value
			case "event":
				e.event = value
			case "data":
				if e.data != nil {
					e.data = append(e.data, '\n')
				}
				e.data = append(e.data, value...)
			}
		}
	}
}

// show displays one event.
func (w *watcher) show(e sse) error {
	if e.event == "state" {
		if err := json.Unmarshal(e.data, &w.job); err != nil {
			return fmt.Errorf("state event %s: %w", e.id, err)
		}
		w.state = string(w.job.State)
		// A retried job goes on after an earlier end: only the last
		// state counts.
		w.ended = w.job.State.Terminal()
	}
	if w.c.json() {
		line, err := json.Marshal(struct {
			ID    string          `json:"id"`
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}{e.id, e.event, json.RawMessage(e.data)})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w.c.stdout, "%s\n", line)
		return err
	}
	switch e.event {
	case "state":
		w.endBar()
		fmt.Fprintf(w.c.stderr, "%s  state %s (attempt %d of %d)\n", eventTime(e.id).Local().Format(time.TimeOnly), w.job.State, w.job.Attempt, w.job.MaxAttempts)
	case "output":
		var out struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(e.data, &out); err != nil {
			return fmt.Errorf("output event %s: %w", e.id, err)
		}
		if out.Text != "" {
			w.midLine = !strings.HasSuffix(out.Text, "\n")
		}
		_, err := io.WriteString(w.c.stdout, out.Text)
		return err
	case "progress":
		if done, total, ok := fraction(e.data); ok {
			w.drawBar(done, total)
			return nil
		}
		w.endBar()
		fmt.Fprintf(w.c.stderr, "progress %s\n", e.data)
	default:
		w.endBar()
		fmt.Fprintf(w.c.stderr, "%s %s\n", e.event, e.data)
	}
	return nil
}

// fraction reads how far a progress event says the job is: {"done": n,
// "total": m}, or {"percent": p} (0 to 100).
func fraction(data []byte) (done, total float64, ok bool) {
	var p struct {
		Done    *float64 `json:"done"`
		Total   *float64 `json:"total"`
		Percent *float64 `json:"percent"`
	}
	if json.Unmarshal(data, &p) != nil {
		return 0, 0, false
	}
	switch {
	case p.Done != nil && p.Total != nil && *p.Total > 0:
		return *p.Done, *p.Total, true
	case p.Percent != nil:
		return *p.Percent, 100, true
	}
	return 0, 0, false
}

// drawBar shows done of total as a bar on stderr: redrawn in place on a
// terminal, a line per event otherwise.
func (w *watcher) drawBar(done, total float64) {
	const width = 30
	f := min(max(done/total, 0), 1)
	n := int(f*width + 0.5)
	bar := fmt.Sprintf("[%s%s] %3.0f%% %g/%g", strings.Repeat("#", n), strings.Repeat(".", width-n), f*100, done, total)
	w.endText()
	if w.isTerm {
		fmt.Fprint(raw(w.c.stderr), "\r")
		fmt.Fprint(w.c.stderr, bar)
		w.bar = true
		return
	}
	fmt.Fprintln(w.c.stderr, bar)
}

// endBar ends the line of a bar drawn in place, or of output text, so the
// next line starts afresh.
func (w *watcher) endBar() {
	if w.bar {
		fmt.Fprintln(w.c.stderr)
		w.bar = false
	}
	w.endText()
}

// endText ends the line of output text that stopped mid-line where stderr
// shows too, so that what stderr writes next starts a line of its own.
func (w *watcher) endText() {
	if w.shared && w.midLine {
		fmt.Fprintln(w.c.stderr)
		w.midLine = false
	}
}

// eventTime is when an event was written: its id is a Redis stream id,
// "<Unix milliseconds>-<sequence>". An id of another form is shown as now.
func eventTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Now()
	}
	return time.UnixMilli(n)
}

// sameFile reports whether a and b are files that are one file: a
// terminal both write to, or one pipe.
func sameFile(a, b io.Writer) bool {
	fa, okA := raw(a).(*os.File)
	fb, okB := raw(b).(*os.File)
	if !okA || !okB {
		return false
	}
	sa, errA := fa.Stat()
	sb, errB := fb.Stat()
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// raw is the writer under w when w escapes control characters.
func raw(w io.Writer) io.Writer {
	if t, ok := w.(*cli.TextWriter); ok {
		return t.Raw()
	}
	return w
}

// isTerminal reports whether w is (or writes to) a character device (a
// terminal).
func isTerminal(w io.Writer) bool {
	f, ok := raw(w).(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
