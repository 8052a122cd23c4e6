// Package remote serves job kinds by calling HTTP handlers, so a kind can
// be written in any language. The worker keeps everything that makes an
// execution safe (the lease, heartbeats, the fencing token, cancel); the
// handler only does the work, behind one POST per execution.
//
// The protocol (docs/handlers.md has it from a handler author's view):
//
//   - The request is POST <url> with the job's input as its body and the
//     headers Leasehold-Job-Id, Leasehold-Execution-Id, Leasehold-Attempt,
//     Leasehold-Kind, Leasehold-Tenant, Fencing-Token, Leasehold-Deadline
//     (RFC 3339: when the execution's timeout ends) and traceparent (the
//     execution's span, so the handler's spans join the job's trace).
//   - 200 application/json: the body is the result.
//   - 200 application/x-ndjson: one JSON object a line. {"event": "progress"
//     | "output" | "log", "data": ...} becomes a job event as it arrives;
//     {"usage": {"tokens": N}} reports the tokens spent (as does a JSON
//     result's usage.total_tokens); {"result": ...} succeeds; {"error":
//     {"message": "...", "retryable": false}} fails the attempt, and the
//     job too unless retryable (default true). A stream that ends without
//     a result or an error fails the attempt.
//   - 429 is pushback (execution.Pushback): the job goes back to its queue
//     without spending an attempt, no sooner than the Retry-After. The
//     header Leasehold-Pushback-Keys may name the job's keys the refusal
//     concerns (execution.PushbackOn); without it, every adaptive key of
//     the job is cut.
//   - Another 4xx than 408 and 429, a redirect, or a reply that breaks the
//     protocol (another content type, a line that is not one of those, a
//     line over Config.MaxLine) fails the job without a retry: calling
//     again would not fix it. 5xx, 408 and connection errors fail the
//     attempt, and the retry waits at least as long as a Retry-After says.
//   - Checkpoints and waits: a line {"checkpoint": ...} saves the job's
//     checkpoint (execution.Checkpoint); a last line {"wait": {"for":
//     "approval", "timeout": "24h"}} ends the execution to wait for that
//     signal (execution.Wait). A call whose execution has a checkpoint or
//     a signal to start from carries HeaderResume, and its body is an
//     Envelope: {"input", "checkpoint", "signal"}.
//   - The request is bound to the execution's context: cancel, a lost
//     lease, the timeout and a graceful hand-off close it, and the handler
//     sees its client go away.
//
// The URLs come from the operator's configuration (ParseHandlers), never
// from a job.
package remote

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
)

// Request headers, beside fencing.Header and traceparent.
const (
	HeaderJobID       = "Leasehold-Job-Id"
	HeaderExecutionID = "Leasehold-Execution-Id"
	HeaderAttempt     = "Leasehold-Attempt"
	HeaderKind        = "Leasehold-Kind"
	HeaderTenant      = "Leasehold-Tenant"
	HeaderDeadline    = "Leasehold-Deadline"
	// HeaderResume says the body is an Envelope, not the bare input: the
	// execution has a checkpoint or a signal to start from. Its value
	// names what the envelope holds: "checkpoint", "signal" or both,
	// comma-separated.
	HeaderResume = "Leasehold-Resume"
)

// Envelope is the body of a call whose execution has a checkpoint or a
// signal (HeaderResume is set): the job's input beside them. Only a
// handler that saved a checkpoint or waited ever receives one, so a
// handler that does neither always gets the bare input.
type Envelope struct {
	Input      json.RawMessage `json:"input"`
	Checkpoint json.RawMessage `json:"checkpoint"` // null for none
	Signal     *job.Signal     `json:"signal"`     // null for none
}

// HeaderPushbackKeys, on a 429, names the keys the refusal concerns,
// comma-separated: only those of the job's keys are cut and throttled. A
// 429 without it concerns every adaptive key of the job.
const HeaderPushbackKeys = "Leasehold-Pushback-Keys"

// maxPushbackKeys bounds the names read of HeaderPushbackKeys: a job names
// far fewer keys.
const maxPushbackKeys = 64

// pushbackKeys returns the keys of named (the job's) that h's
// HeaderPushbackKeys names, none when it names none of them; nil without
// the header.
func pushbackKeys(h http.Header, named []string) []string {
	values := h.Values(HeaderPushbackKeys)
	if values == nil {
		return nil
	}
	keys, read := []string{}, 0
	for _, v := range values {
		for k := range strings.SplitSeq(v, ",") {
			if read++; read > maxPushbackKeys {
				return keys
			}
			if k = strings.TrimSpace(k); slices.Contains(named, k) && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// Content types of a handler's 200.
const (
	ContentJSON   = "application/json"
	ContentNDJSON = "application/x-ndjson"
)

// Defaults of Config.
const (
	DefaultMaxLine  = 1 << 20
	DefaultMaxConns = 256
	// maxRetryAfter bounds the wait a Retry-After can ask for: a handler's
	// "come back tomorrow" should not park a job for a day.
	maxRetryAfter = time.Hour
	// maxErrorBody is how much of an error answer's body goes into the
	// job's error message.
	maxErrorBody = 512
)

// ErrProtocol is wrapped by the error of a handler whose reply breaks the
// protocol: the job fails without a retry.
var ErrProtocol = errors.New("remote handler: protocol")

// Config configures the remote kinds of a worker. The zero value is ready
// to use.
type Config struct {
	// Client makes the requests; default NewClient(MaxConns). A client of
	// your own should follow no redirects and have no Timeout: the
	// execution's own timeout bounds each request.
	Client *http.Client
	// MaxConns bounds the connections to each handler host, when Client is
	// nil; default DefaultMaxConns. Give it at least the worker's
	// concurrency, or executions wait for a connection.
	MaxConns int
	// MaxLine caps one line of an NDJSON stream, and a JSON result, in
	// bytes; default DefaultMaxLine (1 MiB).
	MaxLine int
	// Logger gets what a job's error does not show (transport errors);
	// default slog.Default().
	Logger *slog.Logger
}

// NewClient returns the client remote kinds use by default: at most
// maxConns connections to each host, kept alive between executions, and no
// redirects (a 3xx fails the job).
func NewClient(maxConns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the operator named the handler's address: go there
	tr.MaxConnsPerHost = maxConns
	tr.MaxIdleConnsPerHost = maxConns
	tr.MaxIdleConns = 0 // no bound across hosts beyond each host's
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Register makes w serve each kind of handlers (kind → URL, as
// ParseHandlers returns) by calling its URL.
func Register(w *execution.Worker, handlers map[string]string, cfg Config) {
	if cfg.Client == nil {
		cfg.Client = NewClient(cmp.Or(cfg.MaxConns, DefaultMaxConns))
	}
	for kind, u := range handlers {
		w.Handle(kind, Handler(u, cfg))
	}
}

// ParseHandlers parses LEASEHOLD_HANDLERS: comma-separated kind=url pairs,
// each URL absolute http or https. Its errors name the entry and the kind,
// never a URL, which may carry a secret.
func ParseHandlers(s string) (map[string]string, error) {
	out := map[string]string{}
	n := 0
	for entry := range strings.SplitSeq(s, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		n++
		kind, raw, ok := strings.Cut(entry, "=")
		kind = strings.TrimSpace(kind)
		switch {
		case !ok:
			return nil, fmt.Errorf("LEASEHOLD_HANDLERS entry %d: want kind=url", n)
		case job.ValidateKind(kind) != nil:
			// Not echoed: a URL pasted without its kind would be.
			return nil, fmt.Errorf("LEASEHOLD_HANDLERS entry %d: the kind is not valid: a lower-case letter, then up to 63 of a-z 0-9 _ . -", n)
		case out[kind] != "":
			return nil, fmt.Errorf("LEASEHOLD_HANDLERS entry %d: kind %q named twice", n, kind)
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("LEASEHOLD_HANDLERS entry %d (kind %q): want an absolute http:// or https:// URL", n, kind)
		}
		out[kind] = u.String()
	}
	return out, nil
}

// Handler returns a handler that runs each execution by calling the
// handler at u (see the package comment for the protocol).
func Handler(u string, cfg Config) execution.Handler {
	client := cfg.Client
	if client == nil {
		client = NewClient(cmp.Or(cfg.MaxConns, DefaultMaxConns))
	}
	c := &caller{url: u, client: client, maxLine: cmp.Or(cfg.MaxLine, DefaultMaxLine), log: cmp.Or(cfg.Logger, slog.Default())}
	return c.call
}

type caller struct {
	url     string
	client  *http.Client
	maxLine int
	log     *slog.Logger
}

func (c *caller) call(ctx context.Context, e *execution.Execution) (any, error) {
	body := e.Input
	if len(body) == 0 {
		body = json.RawMessage("{}")
	}
	r := e.Resume()
	var resume []string
	if r.Checkpoint != nil {
		resume = append(resume, "checkpoint")
	}
	if r.Signal != nil {
		resume = append(resume, "signal")
	}
	if len(resume) > 0 {
		var err error
		if body, err = json.Marshal(Envelope{Input: body, Checkpoint: r.Checkpoint, Signal: r.Signal}); err != nil {
			return nil, fmt.Errorf("remote handler: envelope: %w", err) // stored JSON: never
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, execution.Permanent(fmt.Errorf("remote handler: request: %w", err))
	}
	h := req.Header
	if len(resume) > 0 {
		h.Set(HeaderResume, strings.Join(resume, ", "))
	}
	h.Set("Content-Type", ContentJSON)
	h.Set("Accept", ContentNDJSON+", "+ContentJSON)
	h.Set(HeaderJobID, e.JobID)
	h.Set(HeaderExecutionID, e.ID)
	h.Set(HeaderAttempt, strconv.Itoa(e.Attempt()))
	h.Set(HeaderKind, e.Kind)
	h.Set(HeaderTenant, e.Tenant)
	fencing.SetHeader(h, e.Token())
	if deadline, ok := ctx.Deadline(); ok {
		h.Set(HeaderDeadline, deadline.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	// Always W3C trace context, whatever the global propagator: the
	// protocol names traceparent.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))

	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// The transport's words name addresses and what a port sent back:
		// they go to the log, and the job's error stays generic.
		c.log.WarnContext(ctx, "remote handler unreachable", "kind", e.Kind, "job_id", e.JobID, "execution_id", e.ID, "error", err)
		return nil, errors.New("remote handler: connection failed")
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusTooManyRequests:
		// Pushback: the handler's upstream refused for capacity. The job
		// waits without spending an attempt, and the call spent no tokens.
		e.ReportTokens(0)
		d, _ := kinds.PushbackWait(resp.Header, time.Now())
		err := fmt.Errorf("remote handler: %s%s", resp.Status, c.errorBody(resp.Body))
		if keys := pushbackKeys(resp.Header, e.ConcurrencyKeys()); keys != nil {
			return nil, execution.PushbackOn(keys, err, min(d, maxRetryAfter))
		}
		return nil, execution.Pushback(err, min(d, maxRetryAfter))
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout:
		err := fmt.Errorf("remote handler: %s%s", resp.Status, c.errorBody(resp.Body))
		if d, ok := kinds.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return nil, execution.RetryAfter(err, min(d, maxRetryAfter))
		}
		return nil, err
	default:
		return nil, execution.Permanent(fmt.Errorf("remote handler: %s%s", resp.Status, c.errorBody(resp.Body)))
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case ContentJSON:
		res, err := c.result(ctx, resp.Body)
		if err != nil {
			return nil, err
		}
		reportUsage(e, res)
		return res, nil
	case ContentNDJSON:
		return c.stream(ctx, e, resp.Body)
	default:
		return nil, execution.Permanent(fmt.Errorf("%w: 200 with Content-Type %q, want %s or %s", ErrProtocol, ct, ContentJSON, ContentNDJSON))
	}
}

// result reads a JSON result of at most maxLine bytes.
func (c *caller) result(ctx context.Context, body io.Reader) (json.RawMessage, error) {
	b, err := io.ReadAll(io.LimitReader(body, int64(c.maxLine)+1))
	switch {
	case err != nil:
		return nil, c.readFailed(ctx, err)
	case len(b) > c.maxLine:
		return nil, execution.Permanent(fmt.Errorf("%w: result over %d bytes", ErrProtocol, c.maxLine))
	case !json.Valid(b):
		return nil, execution.Permanent(fmt.Errorf("%w: result is not JSON", ErrProtocol))
	}
	return json.RawMessage(b), nil
}

// reportUsage reports the tokens a JSON result says it spent, as
// usage.total_tokens (OpenAI's usage object), if it says.
func reportUsage(e *execution.Execution, res json.RawMessage) {
	var r struct {
		Usage struct {
			TotalTokens *int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(res, &r) == nil && r.Usage.TotalTokens != nil {
		e.ReportTokens(*r.Usage.TotalTokens)
	}
}

// line is one line of an NDJSON stream: exactly one of its members is set.
type line struct {
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	Result json.RawMessage `json:"result"`
	// Usage reports the tokens the handler spent: {"usage": {"tokens": N}}.
	Usage *struct {
		Tokens *int64 `json:"tokens"`
	} `json:"usage"`
	Error *struct {
		Message   string `json:"message"`
		Retryable *bool  `json:"retryable"`
	} `json:"error"`
	// Checkpoint is saved as the job's checkpoint (execution.Checkpoint).
	Checkpoint json.RawMessage `json:"checkpoint"`
	// Wait ends the execution to wait for a signal (execution.Wait).
	Wait *struct {
		For     string `json:"for"`
		Timeout string `json:"timeout"` // a Go duration; default 1h
	} `json:"wait"`
}

// stream turns each line of body into an event, until a result or an error.
func (c *caller) stream(ctx context.Context, e *execution.Execution, body io.Reader) (any, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, min(c.maxLine, 64<<10)), c.maxLine)
	for sc.Scan() {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, execution.Permanent(fmt.Errorf("%w: a line is not a JSON object: %v", ErrProtocol, err))
		}
		switch {
		case l.Result != nil:
			reportUsage(e, l.Result)
			return l.Result, nil
		case l.Checkpoint != nil:
			if err := e.Checkpoint(ctx, l.Checkpoint); err != nil {
				if errors.Is(err, execution.ErrNotOwner) {
					return nil, err
				}
				return nil, execution.Permanent(fmt.Errorf("%w: %v", ErrProtocol, err))
			}
		case l.Wait != nil:
			return nil, waitOf(l.Wait.For, l.Wait.Timeout)
		case l.Usage != nil:
			if l.Usage.Tokens == nil || *l.Usage.Tokens < 0 {
				return nil, execution.Permanent(fmt.Errorf(`%w: a usage line is {"usage": {"tokens": N}}`, ErrProtocol))
			}
			e.ReportTokens(*l.Usage.Tokens)
		case l.Error != nil:
			err := fmt.Errorf("remote handler: %s", cmp.Or(l.Error.Message, "failed"))
			if l.Error.Retryable != nil && !*l.Error.Retryable {
				return nil, execution.Permanent(err)
			}
			return nil, err
		case l.Event != "":
			data := l.Data
			if data == nil {
				data = json.RawMessage("{}")
			}
			if err := e.Emit(ctx, l.Event, data); err != nil {
				if errors.Is(err, execution.ErrNotOwner) || errors.Is(err, execution.ErrTooManyEvents) {
					return nil, err
				}
				// An unknown event type or data that is not JSON.
				return nil, execution.Permanent(fmt.Errorf("%w: %v", ErrProtocol, err))
			}
		default:
			return nil, execution.Permanent(fmt.Errorf("%w: a line has none of event, usage, checkpoint, result, wait and error", ErrProtocol))
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, execution.Permanent(fmt.Errorf("%w: a line over %d bytes", ErrProtocol, c.maxLine))
		}
		return nil, c.readFailed(ctx, err)
	}
	return nil, errors.New("remote handler: the stream ended without a result or an error")
}

// waitOf is the error that ends an execution waiting for the signal name,
// from a wait line: a protocol error when the name or the timeout is bad.
func waitOf(name, timeout string) error {
	if job.ValidateSignalName(name) != nil {
		return execution.Permanent(fmt.Errorf(`%w: a wait line is {"wait": {"for": "<signal name>", "timeout": "24h"}}, the name matching ^[a-z0-9][a-z0-9_.:-]{0,63}$`, ErrProtocol))
	}
	var d time.Duration
	if timeout != "" {
		var err error
		if d, err = time.ParseDuration(timeout); err != nil || d <= 0 {
			return execution.Permanent(fmt.Errorf("%w: a wait's timeout is a positive Go duration such as \"24h\"", ErrProtocol))
		}
	}
	return execution.Wait(name, d)
}

// readFailed is the error of a body that broke off: the execution's own
// cause when its context ended, else a retryable failure.
func (c *caller) readFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	c.log.WarnContext(ctx, "remote handler: reply broke off", "error", err)
	return errors.New("remote handler: the reply broke off")
}

// errorBody is the start of an error answer's body, for the job's error
// message: ": <text>", or "" when there is none.
func (c *caller) errorBody(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "")), " ")
	if s == "" {
		return ""
	}
	return ": " + s
}
