package kinds

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
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// LLMConfig configures the llm.chat kind.
type LLMConfig struct {
	// BaseURL is the root of an OpenAI-compatible API, such as
	// https://api.openai.com/v1: requests go to BaseURL + "/chat/completions".
	// Default none: every llm.chat job then fails at once, without retries.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>"; default none sent.
	APIKey string
	// Client makes the requests; default http.DefaultClient. Leave its
	// Timeout at zero (or longer than any job): the execution's own timeout
	// bounds each request, and a stream may run for minutes.
	Client *http.Client
	// Usage counts the tokens each tenant's completions used (prompt and
	// completion, as the upstream reported them); default nil: not counted.
	// A failed count is logged with slog.Default() and fails no job.
	Usage *usage.Counters
}

// ChatInput is the input of the llm.chat kind.
type ChatInput struct {
	Model       string        `json:"model"`                 // required
	Messages    []ChatMessage `json:"messages"`              // at least one
	MaxTokens   *int          `json:"max_tokens,omitempty"`  // 1 to job.MaxCostTokens when set
	Temperature *float64      `json:"temperature,omitempty"` // 0–2 when set
}

// ChatMessage is one message of a conversation.
type ChatMessage struct {
	Role    string  `json:"role"`    // required: system, user, assistant…
	Content *string `json:"content"` // required; may be ""
}

// ChatResult is the result of an llm.chat job.
type ChatResult struct {
	Text string `json:"text"`
	// Usage is as the upstream reported it; nil when it reported none.
	Usage *Usage `json:"usage"`
}

// Usage counts a completion's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// total is the tokens u counts: the upstream's total, or its parts.
func (u Usage) total() int {
	return cmp.Or(u.TotalTokens, u.PromptTokens+u.CompletionTokens)
}

// ErrNoUpstream is the error of every llm.chat job on a worker configured
// without an upstream.
var ErrNoUpstream = errors.New("llm.chat: no upstream configured (LEASEHOLD_LLM_BASE_URL)")

// How the handler treats an upstream that asks it to come back later, and
// how it batches deltas into output events.
const (
	// maxRetryWait is how long one attempt may spend waiting on Retry-After
	// in total; a longer wait ends the attempt with a retryable error, so
	// the concurrency slot is not held while idle.
	maxRetryWait = 30 * time.Second
	// maxRetries bounds the requests an attempt retries, against an
	// upstream that keeps saying "Retry-After: 0".
	maxRetries = 5
	// Deltas are flushed as one output event when nothing more has arrived
	// yet, or when this many are pending, or when the oldest pending one
	// is this old.
	flushDeltas = 20
	flushAge    = 50 * time.Millisecond
	// maxEvent bounds one server-sent event, and maxErrorBody the part of
	// an error answer that is read.
	maxEvent     = 1 << 20
	maxErrorBody = 64 << 10
)

// LLMChat returns the llm.chat kind: it streams a chat completion from the
// OpenAI-compatible upstream of cfg, emits every delta of text as an output
// event {"text": "..."} (deltas that arrive together are joined into one
// event, in order), and returns a ChatResult.
//
// The request is bound to the execution's context, so cancellation, a lost
// lease or the timeout closes the upstream connection at once. It carries
// the execution's fencing token in the Fencing-Token header.
//
// Bad input and upstream 4xx answers other than 408 and 429 fail the job
// without retries, carrying the upstream's message. A 429, and a 503 with
// Retry-After, are pushback (execution.PushbackOn) on the model's key
// alone: the job goes back to its queue without spending an attempt, to
// come back no sooner than the upstream asked, and its slot is free at
// once for a call that may pass. Other adaptive keys the job names are
// not cut: the upstream that refused is the model's.
// 408, other 5xx and network errors fail the attempt, to be retried; when
// the upstream sends a Retry-After short enough (at most 30 s waited in all
// in one attempt, and ending before the execution's deadline), the handler
// waits and retries inside the attempt instead.
//
// The upstream's usage (prompt and completion tokens) is reported to the
// execution (ReportTokens): it replaces the job's estimate in its keys'
// tpm budgets.
//
// Jobs of this kind should carry the concurrency key model:<model>, so a
// limit on the model caps the requests in flight across every worker.
func LLMChat(cfg LLMConfig) execution.Handler {
	client := cmp.Or(cfg.Client, http.DefaultClient)
	endpoint := strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"
	return func(ctx context.Context, e *execution.Execution) (any, error) {
		if cfg.BaseURL == "" {
			return nil, execution.Permanent(ErrNoUpstream)
		}
		in, err := parseChat(e.Input)
		if err != nil {
			return nil, execution.Permanent(fmt.Errorf("llm.chat: %w", err))
		}
		// A model's limit holds only if every call to it holds its key.
		key := "model:" + in.Model
		if !slices.Contains(e.ConcurrencyKeys(), key) {
			return nil, execution.Permanent(fmt.Errorf("llm.chat: the job does not hold its model's concurrency key %s", key))
		}
		body, err := json.Marshal(chatRequest{
			ChatInput:     in,
			Stream:        true,
			StreamOptions: streamOptions{IncludeUsage: true},
		})
		if err != nil {
			return nil, execution.Permanent(fmt.Errorf("llm.chat: request: %w", err))
		}
		c := &chatCall{client: client, endpoint: endpoint, apiKey: cfg.APIKey, body: body, e: e, key: key}
		res, err := c.run(ctx)
		// Whatever ended the call (success, timeout, cancel, a broken
		// stream), the upstream spent what it streamed.
		if u, ok := c.spent(); ok && cfg.Usage != nil {
			CountTokens(ctx, cfg.Usage, e.Tenant, e.ID, u.PromptTokens, u.CompletionTokens)
		}
		// The budgets take what the upstream reported, or nothing for a
		// refused call. A call that ended before the report (a timeout, a
		// cancel, a broken stream) takes its prompt's estimate and a token
		// per delta it streamed, not its estimate: else a job that asks a
		// large max_tokens and ends at once would hold the key's tpm for
		// a minute.
		switch {
		case c.usage != nil:
			e.ReportTokens(int64(c.usage.total()))
		case errors.Is(err, execution.ErrPushback):
			e.ReportTokens(0)
		default:
			e.ReportTokens(job.ChatPromptTokens(e.Input) + int64(c.deltas))
		}
		return res, err
	}
}

// CountTokens counts a chat call's prompt and completion tokens in
// tenant's usage, in one round trip, with event (an execution's id, a
// chat call's) as the event id: a call's tokens count once. A count the
// upstream made up (below 1, above 2^31-1) is not counted.
func CountTokens(ctx context.Context, counters *usage.Counters, tenant, event string, prompt, completion int) {
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer stop()
	at := []usage.Event{{ID: event, At: time.Now()}}
	var adds []usage.Add
	for counter, n := range map[string]int{usage.LLMPromptTokens: prompt, usage.LLMCompletionTokens: completion} {
		if n >= 1 && n <= math.MaxInt32 {
			adds = append(adds, usage.Add{Tenant: tenant, Counter: counter, N: int64(n), Events: at})
		}
	}
	for i, err := range counters.AddAll(ctx, adds) {
		if err != nil {
			slog.WarnContext(ctx, "usage not counted", "counter", adds[i].Counter, "tenant", tenant, "event", event, "error", err)
		}
	}
}

type chatRequest struct {
	ChatInput
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// parseChat reads an llm.chat input as the handler runs it, and at submit
// (ValidateInput): an *InputError names what it refuses.
func parseChat(raw json.RawMessage) (ChatInput, error) {
	var in ChatInput
	if len(raw) == 0 {
		raw = json.RawMessage(`{}`) // no input: {}, as the API stores it
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, &InputError{Field: "input", Message: err.Error()}
	}
	roles := make([]string, len(in.Messages))
	for i, m := range in.Messages {
		roles[i] = m.Role
	}
	if err := checkChat("input.", in.Model, roles, in.MaxTokens, in.Temperature); err != nil {
		return in, err
	}
	for i, m := range in.Messages {
		if m.Content == nil {
			return in, &InputError{Field: fmt.Sprintf("input.messages[%d].content", i), Message: "is required (a string)"}
		}
	}
	return in, nil
}

// checkChat checks what llm.chat and a chat call (ParseChatCall) share:
// a model, at least one message, each with a role, and max_tokens and
// temperature in range. Fields are named after prefix.
func checkChat(prefix, model string, roles []string, maxTokens *int, temperature *float64) error {
	switch {
	case strings.TrimSpace(model) == "":
		return &InputError{Field: prefix + "model", Message: "is required"}
	case len(roles) == 0:
		return &InputError{Field: prefix + "messages", Message: "must hold at least one message"}
	case maxTokens != nil && (*maxTokens < 1 || *maxTokens > job.MaxCostTokens):
		return &InputError{Field: prefix + "max_tokens", Message: fmt.Sprintf("%d: must be from 1 to %d", *maxTokens, job.MaxCostTokens)}
	case temperature != nil && (*temperature < 0 || *temperature > 2):
		return &InputError{Field: prefix + "temperature", Message: fmt.Sprintf("%v: must be between 0 and 2", *temperature)}
	}
	for i, role := range roles {
		if strings.TrimSpace(role) == "" {
			return &InputError{Field: fmt.Sprintf("%smessages[%d].role", prefix, i), Message: "is required"}
		}
	}
	return nil
}

// ChatCall is what Leasehold reads of an OpenAI chat completion request
// that it forwards upstream (POST /v1/chat/completions).
type ChatCall struct {
	Model  string
	Stream bool
	// IncludeUsage says the caller asked for the usage chunk at the end
	// of a stream (stream_options.include_usage).
	IncludeUsage bool
}

// ParseChatCall reads the body of an OpenAI chat completion request. The
// fields llm.chat has are checked as its input is (an *InputError names
// the field as the body does); every other field, and a message's content
// (text, parts or null beside tool calls), is the upstream's to judge.
func ParseChatCall(body []byte) (ChatCall, error) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		MaxTokens     *int     `json:"max_tokens"`
		Temperature   *float64 `json:"temperature"`
		Stream        bool     `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		field := "body"
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			field = typeErr.Field
		}
		return ChatCall{}, &InputError{Field: field, Message: err.Error()}
	}
	roles := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		roles[i] = m.Role
	}
	if err := checkChat("", req.Model, roles, req.MaxTokens, req.Temperature); err != nil {
		return ChatCall{}, err
	}
	return ChatCall{Model: req.Model, Stream: req.Stream, IncludeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}, nil
}

// chatCall is one execution's call to the upstream.
type chatCall struct {
	client   *http.Client
	endpoint string
	apiKey   string
	body     []byte
	e        *execution.Execution
	key      string // the model's concurrency key: the one a pushback concerns

	usage  *Usage // as the upstream reported it; nil until it does
	deltas int    // content deltas streamed so far
}

// spent is the usage to count for the call: what the upstream reported,
// or, for a stream cut short before its report (a timeout, a cancel), one
// completion token per delta it streamed (OpenAI-compatible upstreams send
// one token per chunk); the prompt's tokens are unknown then. ok is false
// when nothing was spent that is known.
func (c *chatCall) spent() (u Usage, ok bool) {
	if c.usage != nil {
		return *c.usage, true
	}
	return Usage{CompletionTokens: c.deltas}, c.deltas > 0
}

// run posts the request, retrying inside the attempt while the upstream
// asks for a short wait, and reads the answer.
func (c *chatCall) run(ctx context.Context) (*ChatResult, error) {
	var waited time.Duration
	for retries := 0; ; retries++ {
		resp, err := c.post(ctx)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			defer resp.Body.Close()
			return c.read(ctx, resp)
		}
		uerr := readUpstreamError(resp)
		resp.Body.Close()
		if uerr.pushback() {
			return nil, execution.PushbackOn([]string{c.key}, uerr, uerr.retryAfter)
		}
		if !uerr.retryable() {
			return nil, execution.Permanent(uerr)
		}
		wait, ok := uerr.retryAfter, uerr.hasRetryAfter
		if deadline, has := ctx.Deadline(); has && time.Now().Add(wait).After(deadline) {
			ok = false // the attempt would time out waiting
		}
		if !ok || retries >= maxRetries || waited+wait > maxRetryWait {
			return nil, uerr
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("llm.chat: waiting to retry: %w", context.Cause(ctx))
		case <-timer.C:
		}
		waited += wait
	}
}

func (c *chatCall) post(ctx context.Context) (*http.Response, error) {
	// Bound to ctx: when the execution ends, the transport closes the
	// connection, and the upstream sees the client leave and stops.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(c.body))
	if err != nil {
		return nil, execution.Permanent(fmt.Errorf("llm.chat: upstream URL: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	fencing.SetHeader(req.Header, c.e.Token())
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("llm.chat: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("llm.chat: upstream: %w", err)
	}
	return resp, nil
}

// read reads a 200 answer: an event stream, or one JSON completion from
// an upstream that does not stream.
func (c *chatCall) read(ctx context.Context, resp *http.Response) (*ChatResult, error) {
	mediaType := "text/event-stream" // what was asked for, when the upstream does not say
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mediaType, _, _ = mime.ParseMediaType(ct)
	}
	var res *ChatResult
	var err error
	switch mediaType {
	case "text/event-stream":
		res, err = c.stream(ctx, resp.Body)
	case "application/json":
		res, err = c.completion(ctx, resp.Body)
	default:
		return nil, execution.Permanent(fmt.Errorf("llm.chat: upstream answered 200 with Content-Type %q, not an event stream: is %s an OpenAI-compatible API?", mediaType, c.endpoint))
	}
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("llm.chat: %w", context.Cause(ctx))
	}
	return res, err
}

// streamChunk is the part of a chat.completion.chunk the handler reads.
type streamChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
	// Error is how some upstreams report a failure after the 200.
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// stream reads the event stream, emitting deltas as it goes.
func (c *chatCall) stream(ctx context.Context, body io.Reader) (*ChatResult, error) {
	events := newSSEReader(body)
	out := &outputBatch{e: c.e}
	var text strings.Builder
	finished := false
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) && finished {
			break // some upstreams end after the finish_reason without [DONE]
		}
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("llm.chat: upstream stream ended before [DONE], after %d bytes of text", text.Len())
		}
		if err != nil {
			return nil, fmt.Errorf("llm.chat: reading upstream stream: %w", err)
		}
		if string(data) == "[DONE]" {
			break
		}
		var ch streamChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return nil, fmt.Errorf("llm.chat: upstream sent a malformed chunk %.200q: %w", data, err)
		}
		if ch.Error != nil {
			return nil, fmt.Errorf("llm.chat: upstream error mid-stream: %s", ch.Error.Message)
		}
		for _, choice := range ch.Choices {
			if choice.Index != 0 {
				continue
			}
			if choice.Delta.Content != "" {
				text.WriteString(choice.Delta.Content)
				out.add(choice.Delta.Content)
				c.deltas++
			}
			if choice.FinishReason != nil {
				finished = true
			}
		}
		if ch.Usage != nil {
			c.usage = ch.Usage
		}
		// Flush when the next read would wait on the network, so no delta
		// waits for the one after it, and deltas that came together leave
		// together.
		if events.buffered() == 0 || out.full() {
			if err := out.flush(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := out.flush(ctx); err != nil {
		return nil, err
	}
	// Read what is left (little), so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 4<<10))
	return &ChatResult{Text: text.String(), Usage: c.usage}, nil
}

// completion reads one non-streamed chat.completion and emits its text as
// one output event.
func (c *chatCall) completion(ctx context.Context, body io.Reader) (*ChatResult, error) {
	var comp struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage *Usage `json:"usage"`
	}
	if err := json.NewDecoder(io.LimitReader(body, 16<<20)).Decode(&comp); err != nil {
		return nil, fmt.Errorf("llm.chat: upstream completion: %w", err)
	}
	c.usage = comp.Usage
	var text string
	for _, choice := range comp.Choices {
		if choice.Index == 0 {
			text = choice.Message.Content
		}
	}
	out := &outputBatch{e: c.e}
	if text != "" {
		out.add(text)
	}
	if err := out.flush(ctx); err != nil {
		return nil, err
	}
	return &ChatResult{Text: text, Usage: c.usage}, nil
}

// outputBatch gathers deltas into one output event.
type outputBatch struct {
	e     *execution.Execution
	text  strings.Builder
	n     int
	first time.Time
}

func (b *outputBatch) add(delta string) {
	if b.n == 0 {
		b.first = time.Now()
	}
	b.text.WriteString(delta)
	b.n++
}

func (b *outputBatch) full() bool {
	return b.n >= flushDeltas || (b.n > 0 && time.Since(b.first) >= flushAge)
}

func (b *outputBatch) flush(ctx context.Context) error {
	if b.n == 0 {
		return nil
	}
	err := b.e.Emit(ctx, execution.EventOutput, struct {
		Text string `json:"text"`
	}{b.text.String()})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("llm.chat: %w", context.Cause(ctx))
		}
		return fmt.Errorf("llm.chat: output event: %w", err)
	}
	b.text.Reset()
	b.n = 0
	return nil
}

// upstreamError is an upstream's answer other than 200.
type upstreamError struct {
	status        int
	message       string
	retryAfter    time.Duration
	hasRetryAfter bool
}

func (e *upstreamError) Error() string {
	msg := fmt.Sprintf("llm.chat: upstream %d %s", e.status, http.StatusText(e.status))
	if e.message != "" {
		msg += ": " + e.message
	}
	if e.hasRetryAfter {
		msg += fmt.Sprintf(" (Retry-After %v)", e.retryAfter)
	}
	return msg
}

// retryable: rate limits, timeouts and server errors pass; any other
// refusal would be refused again.
func (e *upstreamError) retryable() bool {
	return e.status == http.StatusTooManyRequests || e.status == http.StatusRequestTimeout || e.status >= 500
}

// pushback: the upstream refused for capacity, not for the request.
func (e *upstreamError) pushback() bool {
	return e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable && e.hasRetryAfter
}

func readUpstreamError(resp *http.Response) *upstreamError {
	e := &upstreamError{status: resp.StatusCode}
	e.retryAfter, e.hasRetryAfter = PushbackWait(resp.Header, time.Now())
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e.message = errorMessage(b)
	return e
}

// errorMessage finds the message in an error body: OpenAI's
// {"error": {"message": ...}}, the looser {"error": "..."} or
// {"message": ...}, an RFC 9457 detail, or else the text itself.
func errorMessage(b []byte) string {
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(b, &body) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var flat string
		switch {
		case json.Unmarshal(body.Error, &nested) == nil && nested.Message != "":
			return nested.Message
		case json.Unmarshal(body.Error, &flat) == nil && flat != "":
			return flat
		case body.Message != "":
			return body.Message
		case body.Detail != "":
			return body.Detail
		}
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// PushbackWait reads how long an upstream that refused a call asks to be
// left alone: retry-after-ms (Azure OpenAI, and OpenAI's own SDKs read it),
// else Retry-After, else the reset of the rate limit that ran out, by
// OpenAI's x-ratelimit-remaining-{requests,tokens} and
// x-ratelimit-reset-{requests,tokens} ("1s", "6m0s", "20ms"): the longer
// when both ran out. ok is false when the answer says nothing.
func PushbackWait(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if ms, err := strconv.ParseFloat(strings.TrimSpace(h.Get("Retry-After-Ms")), 64); err == nil && ms >= 0 {
		return time.Duration(ms * float64(time.Millisecond)), true
	}
	if d, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		return d, true
	}
	for _, limit := range []string{"requests", "tokens"} {
		if strings.TrimSpace(h.Get("X-Ratelimit-Remaining-"+limit)) != "0" {
			continue
		}
		if d, err := time.ParseDuration(strings.TrimSpace(h.Get("X-Ratelimit-Reset-" + limit))); err == nil && d >= 0 {
			wait, ok = max(wait, d), true
		}
	}
	return wait, ok
}

// ParseRetryAfter reads a Retry-After value, delay-seconds or an HTTP
// date, as a wait from now. A date in the past is no wait.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// sseReader reads the data of server-sent events, as the WHATWG spec
// reads them: lines end in LF, CRLF or CR; lines starting with ':' are
// comments; an event's data lines are joined with LF, and a blank line ends
// it. Fields other than data are ignored. Unlike the spec, an event cut
// short by the end of the stream is still returned, so a final
// "data: [DONE]" without its blank line counts.
type sseReader struct {
	r      *bufio.Reader
	line   []byte
	data   []byte
	skipLF bool // the last line ended in CR: a LF next belongs to it
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReader(r)} }

// next returns the data of the next event, valid until the next call, or
// io.EOF at the end of the stream.
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	has := false
	for {
		line, err := s.readLine()
		if errors.Is(err, io.EOF) && has {
			return s.data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if has {
				return s.data, nil
			}
			continue
		}
		// A comment (": keep-alive") is a line whose field name is empty,
		// so it is skipped with every field other than data.
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if has {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		has = true
		if len(s.data) > maxEvent {
			return nil, fmt.Errorf("server-sent event larger than %d bytes", maxEvent)
		}
	}
}

// readLine returns the next line without its end, valid until the next
// call. A last line without an end is returned before io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(s.line) > 0 {
				return s.line, nil
			}
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return s.line, nil
		case '\r':
			s.skipLF = true
			return s.line, nil
		}
		s.line = append(s.line, b)
		if len(s.line) > maxEvent {
			return nil, fmt.Errorf("server-sent event line longer than %d bytes", maxEvent)
		}
	}
}

// buffered is how many bytes have arrived but not been read: 0 means the
// next read waits on the network.
func (s *sseReader) buffered() int { return s.r.Buffered() }
