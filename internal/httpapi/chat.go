package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/lease"
)

// Bounds of a chat call (POST /v1/chat/completions).
const (
	// DefaultChatMaxWait is how long a call waits in line for its keys
	// when its Leasehold-Max-Wait header says nothing; MaxChatWait is the
	// longest that header may ask.
	DefaultChatMaxWait = 30 * time.Second
	MaxChatWait        = 5 * time.Minute
	// chatLeaseTTL is the lease of a call's slots, renewed while it runs:
	// an API process that dies mid-call frees them within it.
	chatLeaseTTL = 10 * time.Second
	// maxChatAnswer bounds an upstream's JSON answer, and one line of its
	// stream.
	maxChatAnswer = 16 << 20
)

// LLMConfig is the OpenAI-compatible upstream chat calls are forwarded to:
// the one the workers' llm.chat jobs call.
type LLMConfig struct {
	// BaseURL is the upstream's API root, such as
	// https://api.openai.com/v1; default none: every call is answered 501.
	BaseURL string
	// APIKey is sent upstream as "Authorization: Bearer <key>"; default
	// none sent.
	APIKey string
	// Client makes the upstream requests; default http.DefaultClient.
	// Leave its Timeout at zero: a stream may run for minutes, and a call
	// ends when its client goes away.
	Client *http.Client
}

// chatError is an OpenAI-shaped refusal: OpenAI clients read its message.
type chatError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Param   string `json:"param,omitempty"`
}

func writeChatError(w http.ResponseWriter, status int, e chatError) {
	writeJSON(w, status, struct {
		Error chatError `json:"error"`
	}{e})
}

// chatCompletions serves an OpenAI chat completion under the fleet's
// limits: it waits in its model key's line for the slots an llm.chat job
// of the model would hold, forwards the body upstream, answers as the
// upstream does, and settles the budgets with the tokens spent.
func (s *server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	tenant, ok := s.tenantOf(r)
	if !ok {
		writeChatError(w, http.StatusUnauthorized, chatError{Message: "missing or unknown API key: send Authorization: Bearer <key>",
			Type: "invalid_request_error", Code: "invalid_api_key"})
		return
	}
	body, err := readJSONBody(w, r, s.maxBody)
	if err != nil {
		s.failChat(w, r, err)
		return
	}
	call, err := kinds.ParseChatCall(body)
	var invalid *kinds.InputError
	if errors.As(err, &invalid) {
		writeChatError(w, http.StatusBadRequest, chatError{Message: invalid.Error(), Type: "invalid_request_error", Code: "invalid_value", Param: invalid.Field})
		return
	}
	modelKey := "model:" + call.Model
	if err := job.ValidateLimitKey(modelKey); err != nil {
		writeChatError(w, http.StatusBadRequest, chatError{Message: "model: " + err.Error(), Type: "invalid_request_error", Code: "invalid_value", Param: "model"})
		return
	}
	maxWait, err := parseMaxWait(r.Header.Get("Leasehold-Max-Wait"))
	if err != nil {
		writeChatError(w, http.StatusBadRequest, chatError{Message: "Leasehold-Max-Wait: " + err.Error(), Type: "invalid_request_error", Code: "invalid_value", Param: "Leasehold-Max-Wait"})
		return
	}
	if s.llm.BaseURL == "" {
		writeChatError(w, http.StatusNotImplemented, chatError{Message: "no upstream is configured for chat completions (LEASEHOLD_LLM_BASE_URL)",
			Type: "server_error", Code: "upstream_not_configured"})
		return
	}
	estimate := job.Submission{Kind: "llm.chat", Input: body}.Tokens()
	sem, cfg, err := s.chatLine(r.Context(), tenant, modelKey, estimate)
	if err != nil {
		s.failChat(w, r, err)
		return
	}
	cfg.MaxWait = max(maxWait, time.Nanosecond) // 0 waits for nothing: the key has room now, or 429
	id := uuid.Must(uuid.NewV7()).String()
	permit, err := sem.Wait(r.Context(), "call:"+id, cfg)
	if err != nil {
		s.failChat(w, r, err)
		return
	}
	c := &chatForward{s: s, w: w, call: call, tenant: tenant, id: id}
	spent, pushback, retryAfter := c.forward(permit.Context(), body)
	kinds.CountTokens(r.Context(), s.usage, tenant, id, spent.Prompt, spent.Completion)
	outcome, tokens := lease.OutcomeOK, int64(spent.total())
	switch {
	case pushback:
		outcome, tokens = lease.OutcomePushback, 0
	case !spent.known:
		// Cut short before the upstream's report (the client left, the
		// upstream broke off): the prompt's estimate and a token a delta,
		// as llm.chat counts such a call, not its whole estimate.
		outcome, tokens = lease.OutcomeOther, job.ChatPromptTokens(body)+int64(spent.Completion)
	}
	if err := permit.Settle(outcome, tokens, retryAfter); err != nil {
		s.log.WarnContext(r.Context(), "chat call: slots not settled; they expire with their leases", attrErr, err)
	}
}

// chatLine returns the line a call of tenant to modelKey waits in, and the
// keys it holds with it: the keys an llm.chat job of the model holds
// (the model's, the tenant's, and the tenant's share of each key with
// per_tenant), with their limits and budgets as Redis holds them now.
func (s *server) chatLine(ctx context.Context, tenant, modelKey string, estimate int64) (*lease.Semaphore, lease.WaitConfig, error) {
	tenantKey := "tenant:" + tenant
	rctx, stop := s.redisContext(ctx, 0)
	defer stop()
	limits, budgets, err := s.store.KeyLimits(rctx, []string{modelKey, tenantKey})
	if err != nil {
		return nil, lease.WaitConfig{}, err
	}
	ask := func(key string) lease.Ask {
		b, _ := scripts.Lookup(budgets, key)
		return lease.Ask{Key: key, Limit: int(scripts.LimitOf(limits, key)), Budget: b}
	}
	line := ask(modelKey)
	cfg := lease.WaitConfig{NATS: s.nc, Budget: line.Budget, Tokens: estimate, Also: []lease.Ask{ask(tenantKey)}}
	for _, k := range []string{modelKey, tenantKey} {
		a := ask(k)
		if a.Budget.PerTenant > 0 {
			cfg.Also = append(cfg.Also, lease.Ask{Key: keys.ShareKey(k, tenantKey), Limit: int(a.Budget.PerTenant),
				Budget: a.Budget.Share(int64(a.Limit))})
		}
	}
	limit := line.Limit
	if limit == 0 {
		return nil, cfg, &lease.FullError{Key: modelKey, RetryAfter: time.Second}
	}
	return s.leases.Semaphore(modelKey, limit, chatLeaseTTL), cfg, nil
}

// parseMaxWait reads Leasehold-Max-Wait: a Go duration or whole seconds,
// at most MaxChatWait; empty is DefaultChatMaxWait.
func parseMaxWait(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return DefaultChatMaxWait, nil
	}
	d, err := time.ParseDuration(v)
	if secs, serr := strconv.ParseInt(v, 10, 64); serr == nil {
		d, err = time.Duration(min(secs, int64(MaxChatWait/time.Second)+1))*time.Second, nil
	}
	if err != nil || d < 0 || d > MaxChatWait {
		return 0, fmt.Errorf("%q: want a duration (30s) or whole seconds, from 0 to %v", v, MaxChatWait)
	}
	return d, nil
}

// failChat answers a call that failed before it reached the upstream,
// OpenAI-shaped.
func (s *server) failChat(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	var bad *badRequest
	var full *lease.FullError
	switch {
	case errors.Is(err, errUnsupportedMedia):
		writeChatError(w, http.StatusUnsupportedMediaType, chatError{Message: "the body must be JSON, sent with Content-Type: application/json", Type: "invalid_request_error", Code: "unsupported_media_type"})
	case errors.As(err, &tooLarge):
		writeChatError(w, http.StatusRequestEntityTooLarge, chatError{Message: fmt.Sprintf("the body is larger than %d bytes", tooLarge.Limit), Type: "invalid_request_error", Code: "body_too_large"})
	case errors.Is(err, errBodyTimeout):
		writeChatError(w, http.StatusRequestTimeout, chatError{Message: "the body did not arrive in time", Type: "invalid_request_error", Code: "body_timeout"})
	case errors.As(err, &bad):
		writeChatError(w, http.StatusBadRequest, chatError{Message: bad.detail, Type: "invalid_request_error", Code: "invalid_value"})
	case errors.Is(err, lease.ErrTimedOut), errors.As(err, &full):
		w.Header().Set("Retry-After", "1")
		writeChatError(w, http.StatusTooManyRequests, chatError{Message: "the model's keys had no room within Leasehold-Max-Wait; retry after Retry-After seconds",
			Type: "rate_limit_exceeded", Code: "leasehold_max_wait"})
	case r.Context().Err() != nil:
		s.log.DebugContext(r.Context(), "chat call abandoned by the client", attrErr, err)
	case unavailable(err) || errors.Is(err, lease.ErrTicketLost):
		s.log.WarnContext(r.Context(), "chat call: redis unavailable", attrErr, err)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeChatError(w, http.StatusServiceUnavailable, chatError{Message: "the job store is unavailable or too slow; retry later", Type: "server_error", Code: "unavailable"})
	default:
		s.log.ErrorContext(r.Context(), "chat call failed", attrErr, err)
		writeChatError(w, http.StatusInternalServerError, chatError{Message: "internal error", Type: "server_error", Code: "internal_error"})
	}
}

// chatSpent is what a call spent: the upstream's usage when it reported
// it (known), else a completion token per streamed delta.
type chatSpent struct {
	Prompt, Completion int
	known              bool
}

func (u chatSpent) total() int { return u.Prompt + u.Completion }

// chatForward is one call forwarded upstream.
type chatForward struct {
	s      *server
	w      http.ResponseWriter
	call   kinds.ChatCall
	tenant string
	id     string
}

// forward posts body upstream under ctx (the client's request, and the
// permit's leases) and answers the client as the upstream answers. It
// returns what the call spent, and whether the upstream pushed back (429,
// or 503 with a wait) and for how long.
func (c *chatForward) forward(ctx context.Context, body []byte) (spent chatSpent, pushback bool, retryAfter time.Duration) {
	injected := false
	if c.call.Stream && !c.call.IncludeUsage {
		// The budgets need the real usage: ask for it, and keep its chunk
		// from a client that did not.
		body, injected = withUsage(body), true
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.s.llm.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		c.fail(ctx, err)
		return spent, false, 0
	}
	req.Header.Set("Content-Type", "application/json")
	if c.call.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if c.s.llm.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.s.llm.APIKey)
	}
	client := c.s.llm.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		c.fail(ctx, err)
		return spent, false, 0
	}
	defer resp.Body.Close()
	h := c.w.Header()
	for _, name := range []string{"Content-Type", "Retry-After", "Retry-After-Ms", "X-Request-Id"} {
		if v := resp.Header.Get(name); v != "" {
			h.Set(name, v)
		}
	}
	if resp.StatusCode != http.StatusOK {
		wait, has := kinds.PushbackWait(resp.Header, time.Now())
		pushback = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable && has
		c.w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(c.w, io.LimitReader(resp.Body, maxChatAnswer))
		return spent, pushback, wait
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return c.stream(resp.Body, injected), false, 0
	}
	return c.answer(resp.Body), false, 0
}

// fail answers a call the upstream never answered: 502, or nothing for a
// client that left.
func (c *chatForward) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.s.log.WarnContext(ctx, "chat call: upstream unreachable", attrErr, err)
	writeChatError(c.w, http.StatusBadGateway, chatError{Message: "the upstream did not answer", Type: "server_error", Code: "upstream_unreachable"})
}

// withUsage returns a streaming body with stream_options.include_usage
// set; body is a JSON object (ParseChatCall read it).
func withUsage(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	opts := map[string]json.RawMessage{}
	_ = json.Unmarshal(m["stream_options"], &opts)
	opts["include_usage"] = json.RawMessage("true")
	m["stream_options"], _ = json.Marshal(opts)
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// chatUsage is the part of a completion, or of a stream's chunk, that
// says what it spent.
type chatUsage struct {
	Choices []json.RawMessage `json:"choices"`
	Usage   *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// answer copies one JSON completion to the client.
func (c *chatForward) answer(body io.Reader) chatSpent {
	b, _ := io.ReadAll(io.LimitReader(body, maxChatAnswer))
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(b)
	var u chatUsage
	if json.Unmarshal(b, &u) != nil || u.Usage == nil {
		return chatSpent{}
	}
	return chatSpent{Prompt: u.Usage.PromptTokens, Completion: u.Usage.CompletionTokens, known: true}
}

// stream copies an event stream to the client event by event, flushing
// each, and reads the usage as it passes; with injected, the usage chunk
// the client did not ask for is left out.
func (c *chatForward) stream(body io.Reader, injected bool) chatSpent {
	rc := http.NewResponseController(c.w)
	c.w.WriteHeader(http.StatusOK)
	var spent chatSpent
	var event bytes.Buffer
	drop := false // the event is the usage chunk the client did not ask for
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxChatAnswer)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if event.Len() > 0 && !drop {
				event.WriteByte('\n')
				if _, err := c.w.Write(event.Bytes()); err != nil {
					return spent // the client left
				}
				_ = rc.Flush()
			}
			event.Reset()
			drop = false
			continue
		}
		event.Write(line)
		event.WriteByte('\n')
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		var u chatUsage
		if !ok || json.Unmarshal(bytes.TrimSpace(data), &u) != nil {
			continue
		}
		switch {
		case u.Usage != nil:
			spent = chatSpent{Prompt: u.Usage.PromptTokens, Completion: u.Usage.CompletionTokens, known: true}
			drop = injected && len(u.Choices) == 0
		case !spent.known && len(u.Choices) > 0:
			spent.Completion++
		}
	}
	if event.Len() > 0 && !drop {
		_, _ = c.w.Write(event.Bytes())
		_ = rc.Flush()
	}
	return spent
}
