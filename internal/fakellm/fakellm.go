// Package fakellm is an OpenAI-compatible chat completions server for
// tests and demos. It streams numbered tokens ("token-1 ", "token-2 ", …)
// at a chosen pace, answers canned errors on demand (429 with Retry-After,
// 500, 400), and counts what a test of a client needs to see: requests in
// flight and their peak, and clients that went away before their answer
// was complete.
//
// It serves POST /v1/chat/completions and POST /chat/completions. A
// streaming request ("stream": true) gets server-sent events: a first chunk
// with the assistant role, one chunk per token, a chunk with the
// finish_reason, a usage chunk when stream_options.include_usage is set
// (as OpenAI does; llm.chat sets it), and "data: [DONE]". Any other
// request gets one JSON completion, with its usage. Usage counts the
// prompt's tokens as the words of the messages' contents, and the
// completion's as the tokens sent.
//
// # Hidden limits
//
// Like a real provider, the server can enforce limits that the client is
// not told in advance (Limits), set by a test through Config.Limits and
// changed at run time with SetLimits, never through the product's own
// configuration:
//
//   - Concurrency: how many requests it answers at once;
//   - RPM: requests admitted in any rolling minute (Window);
//   - TPM: tokens admitted in any rolling minute, a request's prompt plus
//     its answer's completion tokens, as OpenAI bills them. The answer's
//     length is Config.AnswerTokens (SetAnswerTokens) when set, so a test
//     can ask max_tokens 300 of a model that says 20.
//
// A valid request over any of them is refused with 429 (or Limits.Status,
// such as 503) and OpenAI's error body, a Retry-After in whole seconds and
// a retry-after-ms: the time until the request fits the windows, or
// Limits.RetryAfter (1s) over Concurrency. Every answer to a valid
// request, refused or not, carries OpenAI's x-ratelimit-limit-, -remaining- and -reset-requests and
// -tokens headers for the RPM and TPM in force, the resets in OpenAI's
// duration format ("20ms", "1s", "6m0s"): how long until a request like
// this one fits. Admitted requests count in the windows when they are
// admitted, at their whole usage; refused ones do not count. Stats reads
// the calls, the refusals, the windows' contents and the peak of admitted
// requests served at once. Config.Clock lets a test move the windows'
// clock instead of waiting a minute.
//
// A model named "fake-capacity-N" (CapacityModel and N, 1 to 1000) has a
// concurrency capacity of its own, N requests at once, which nothing
// configures: a user of the dev mode, whose upstream this server is, can
// watch an adaptive limit on the key model:fake-capacity-N learn it.
//
// The fakellm command (internal/fakellm/cmd/fakellm) sets the same limits
// with flags.
package fakellm

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Tokens is how many tokens a completion has when the request sets no
	// max_tokens; default 16. A request's max_tokens wins.
	Tokens int
	// Delay is the wait before each token; default none.
	Delay time.Duration
	// HangAfter, when above 0, makes a stream stop after that many tokens
	// and stay open, sending nothing, until the client goes away or Close
	// is called: a stalled upstream.
	HangAfter int
	// APIKey, when set, must come as "Authorization: Bearer <key>"; other
	// requests get 401. Default: no key is checked.
	APIKey string
	// Model is reported in answers when the request names none; default
	// "fake".
	Model string
	// AnswerTokens, when above 0, is how long the model's answer is,
	// whatever the request's max_tokens: a max_tokens below it cuts the
	// answer short (finish_reason "length"), one above it is not used up
	// (finish_reason "stop"), as a request that asks max_tokens 300 of a
	// model that says 20. Default 0: the answer is max_tokens long, or
	// Tokens without one. SetAnswerTokens changes it at run time.
	AnswerTokens int
	// Limits are the hidden limits the server starts with; default none.
	// SetLimits changes them at run time.
	Limits Limits
	// Clock is the rolling windows' clock; default time.Now. A test of the
	// windows moves it by hand instead of waiting a minute.
	Clock func() time.Time
}

// Failure is a canned error answer, in OpenAI's error format:
// {"error": {"message": ..., "type": ...}}.
type Failure struct {
	// Status is the HTTP status, such as 429, 500 or 400.
	Status int
	// RetryAfter is the Retry-After header's value (seconds or an HTTP
	// date); empty sends none.
	RetryAfter string
	// Message is error.message; default the status text.
	Message string
}

// Request is a request the server received, as it was decoded.
type Request struct {
	At     time.Time
	Path   string
	Header http.Header
	Body   ChatRequest
}

// ChatRequest is the part of a chat completion request the server reads.
type ChatRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// StreamOptions are a streaming request's options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Usage counts a completion's tokens. Prompt tokens are the words of the
// messages' contents.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Server is the fake upstream. It is an http.Handler; serve it with
// httptest.NewServer or an http.Server. Its methods are safe for
// concurrent use.
type Server struct {
	cfg  Config
	quit chan struct{}
	once sync.Once

	mu           sync.Mutex
	seq          int
	inFlight     int
	peak         int
	disconnects  int
	failures     []Failure
	requests     []Request
	answerTokens int
	limits       Limits
	window       []admitted // oldest first
	refused      int
	serving      int
	peakServing  int
	modelServing map[string]int // admitted calls served now, by model name
	busy         time.Duration  // serving integrated over time (account)
	since        time.Time      // when busy was last brought up to date
}

// New returns a server configured by cfg.
func New(cfg Config) *Server {
	cfg.Tokens = cmp.Or(cfg.Tokens, 16)
	cfg.Model = cmp.Or(cfg.Model, "fake")
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Server{cfg: cfg, quit: make(chan struct{}), answerTokens: cfg.AnswerTokens, limits: cfg.Limits}
}

// SetAnswerTokens sets how long the model's answers are from now on (see
// Config.AnswerTokens); 0 goes back to max_tokens or Config.Tokens.
func (s *Server) SetAnswerTokens(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answerTokens = n
}

// Close ends every stream that is hanging (see Config.HangAfter) or
// waiting between tokens, so an http.Server or httptest.Server serving s
// can shut down. Later streams end at once. It is not a disconnect.
func (s *Server) Close() { s.once.Do(func() { close(s.quit) }) }

// FailNext makes the next n requests get f instead of a completion. Calls
// queue up: FailNext(1, a) then FailNext(2, b) answers a, b, b.
func (s *Server) FailNext(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, f)
	}
}

// InFlight is how many requests the server is answering now.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// PeakInFlight is the most requests it has answered at once.
func (s *Server) PeakInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Disconnects counts requests whose client went away (their context
// ended) before the answer was complete.
func (s *Server) Disconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disconnects
}

// Requests returns every request received so far on a completions path,
// in order, failed ones included.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ServeHTTP answers chat completion requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions" {
		writeError(w, Failure{Status: http.StatusNotFound, Message: "unknown path " + r.URL.Path})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, Failure{Status: http.StatusMethodNotAllowed})
		return
	}
	s.enter()
	defer s.leave()

	var req ChatRequest
	decodeErr := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req)
	f, failing := s.record(r, req)
	switch {
	case failing:
		writeError(w, f)
	case s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey:
		writeError(w, Failure{Status: http.StatusUnauthorized, Message: "Incorrect API key provided."})
	case decodeErr != nil:
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "We could not parse the JSON body of your request: " + decodeErr.Error()})
	case len(req.Messages) == 0:
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "'messages' must contain at least one message."})
	case req.MaxTokens != nil && *req.MaxTokens < 1:
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "'max_tokens' must be at least 1."})
	default:
		p := s.plan(req)
		if f := s.admit(w.Header(), p.usage.TotalTokens, p.model); f != nil {
			writeError(w, *f)
			return
		}
		defer s.served(p.model)
		if req.Stream {
			s.stream(w, r, req, p)
		} else {
			s.complete(w, r, p)
		}
	}
}

// record notes r and takes the next canned failure, if any.
func (s *Server) record(r *http.Request, body ChatRequest) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{At: time.Now(), Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	if len(s.failures) == 0 {
		return Failure{}, false
	}
	f := s.failures[0]
	s.failures = s.failures[1:]
	return f, true
}

func (s *Server) enter() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
}

func (s *Server) disconnected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disconnects++
}

// plan is what one completion will say.
type plan struct {
	id, model string
	created   int64
	tokens    int
	finish    string
	usage     Usage
}

func (s *Server) plan(req ChatRequest) plan {
	s.mu.Lock()
	s.seq++
	seq, answer := s.seq, s.answerTokens
	s.mu.Unlock()
	p := plan{
		id:      "chatcmpl-fake-" + strconv.Itoa(seq),
		model:   cmp.Or(req.Model, s.cfg.Model),
		created: time.Now().Unix(),
		tokens:  s.cfg.Tokens,
		finish:  "stop",
	}
	if req.MaxTokens != nil {
		p.tokens, p.finish = *req.MaxTokens, "length"
	}
	if answer > 0 && (req.MaxTokens == nil || answer <= *req.MaxTokens) {
		p.tokens, p.finish = answer, "stop"
	}
	for _, m := range req.Messages {
		p.usage.PromptTokens += len(strings.Fields(m.Content))
	}
	p.usage.CompletionTokens = p.tokens
	p.usage.TotalTokens = p.usage.PromptTokens + p.tokens
	return p
}

// Token is the text of token n (from 1): "token-n ".
func Token(n int) string { return "token-" + strconv.Itoa(n) + " " }

// Text is the whole text of a completion of n tokens.
func Text(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(Token(i))
	}
	return b.String()
}

// wait waits d, or until the client goes away (false, counted as a
// disconnect) or the server closes (false).
func (s *Server) wait(r *http.Request, d time.Duration, forever bool) bool {
	var timeout <-chan time.Time
	if !forever {
		if d <= 0 {
			if r.Context().Err() != nil {
				s.disconnected()
				return false
			}
			return true
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		return true
	case <-r.Context().Done():
		s.disconnected()
		return false
	case <-s.quit:
		return false
	}
}

type chunkChoice struct {
	Index        int               `json:"index"`
	Delta        map[string]string `json:"delta"`
	FinishReason *string           `json:"finish_reason"`
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, req ChatRequest, p plan) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(c chunk) bool {
		c.ID, c.Object, c.Created, c.Model = p.id, "chat.completion.chunk", p.created, p.model
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			s.disconnected()
			return false
		}
		if err := rc.Flush(); err != nil {
			s.disconnected()
			return false
		}
		return true
	}
	if !send(chunk{Choices: []chunkChoice{{Delta: map[string]string{"role": "assistant", "content": ""}}}}) {
		return
	}
	for n := 1; n <= p.tokens; n++ {
		if s.cfg.HangAfter > 0 && n > s.cfg.HangAfter {
			s.wait(r, 0, true)
			return
		}
		if !s.wait(r, s.cfg.Delay, false) {
			return
		}
		if !send(chunk{Choices: []chunkChoice{{Delta: map[string]string{"content": Token(n)}}}}) {
			return
		}
	}
	if !send(chunk{Choices: []chunkChoice{{Delta: map[string]string{}, FinishReason: &p.finish}}}) {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		if !send(chunk{Choices: []chunkChoice{}, Usage: &p.usage}) {
			return
		}
	}
	if _, err := fmt.Fprint(w, "data: [DONE]\n\n"); err != nil {
		s.disconnected()
		return
	}
	_ = rc.Flush() // the answer is complete; a client gone now missed only [DONE]
}

// complete answers a non-streaming request after the time the tokens would
// have taken to stream.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, p plan) {
	n := p.tokens
	if s.cfg.HangAfter > 0 && n > s.cfg.HangAfter {
		s.wait(r, 0, true)
		return
	}
	if !s.wait(r, time.Duration(n)*s.cfg.Delay, false) {
		return
	}
	type choice struct {
		Index        int               `json:"index"`
		Message      map[string]string `json:"message"`
		FinishReason string            `json:"finish_reason"`
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
		Usage   Usage    `json:"usage"`
	}{p.id, "chat.completion", p.created, p.model,
		[]choice{{Message: map[string]string{"role": "assistant", "content": Text(n)}, FinishReason: p.finish}}, p.usage})
}

// writeError answers f in OpenAI's error format.
func writeError(w http.ResponseWriter, f Failure) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	typ := "invalid_request_error"
	switch {
	case f.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case f.Status >= 500:
		typ = "server_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Status)
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	body.Error.Message = cmp.Or(f.Message, http.StatusText(f.Status))
	body.Error.Type = typ
	_ = json.NewEncoder(w).Encode(body)
}
