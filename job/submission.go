package job

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultQueue is the queue of a submission that names none.
const DefaultQueue = "default"

// The range of a job's priority (higher runs first). It is bounded so a
// queue's ready score, (100 - priority) * 2^43 + sequence, stays an exact
// integer in a double.
const (
	MinPriority = -100
	MaxPriority = 100
)

// Limits and defaults of the other fields, as API.md states them.
const (
	maxAttempts        = 100
	maxTimeout         = 24 * time.Hour
	maxDelay           = 30 * 24 * time.Hour
	maxConcurrencyKeys = 16
	maxInputSize       = 1 << 20  // bytes of input JSON
	maxMetadataSize    = 64 << 10 // bytes of metadata JSON

	defaultMaxAttempts = 3
	defaultTimeout     = 10 * time.Minute
)

var (
	kindPattern   = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
	queuePattern  = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)
	tenantPattern = queuePattern
	// A job's key names one limit; '*' (one limit per value) belongs to
	// limit definitions only, so it is refused here with its own message.
	concurrencyKeyPattern = regexp.MustCompile(`^[a-zA-Z0-9_.:/*-]{1,128}$`)
)

// Duration is a time.Duration written in JSON as a Go duration string
// ("30s", "10m"), as the API wants it.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string; null leaves the zero value.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`duration must be a string such as "30s": %w`, err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Submission is the body of a submit request. Only Kind is required; zero
// values mean the defaults: queue DefaultQueue, input {}, max_attempts 3
// (1–100), timeout 10m (at most 24h), max_wait unlimited, delay none (at
// most 30 days), on_busy queue, priority 0 (MinPriority..MaxPriority). Decode it with
// DisallowUnknownFields to refuse unknown fields.
//
// Durations are stored in whole milliseconds, rounded up, so no positive
// duration becomes zero.
type Submission struct {
	Kind            string          `json:"kind"`
	Queue           string          `json:"queue,omitempty"`
	Input           json.RawMessage `json:"input,omitempty"`
	ConcurrencyKeys []string        `json:"concurrency_keys,omitempty"`
	Priority        int             `json:"priority,omitempty"` // MinPriority..MaxPriority, higher first
	MaxAttempts     int             `json:"max_attempts,omitempty"`
	Timeout         Duration        `json:"timeout,omitempty"`
	MaxWait         Duration        `json:"max_wait,omitempty"`
	Delay           Duration        `json:"delay,omitempty"`
	OnBusy          OnBusy          `json:"on_busy,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`

	// Schedule names the schedule that fires this job (package schedule);
	// "" for a job submitted directly. A client cannot set it: it is not
	// part of the API's submission body.
	Schedule string `json:"-"`
	// Cost is what the job expects to spend of its keys' token budgets.
	Cost *Cost `json:"cost,omitempty"`
	// Webhook is where the job's end is POSTed (package webhook); nil for
	// none. Validate checks it is an http(s) URL; which URLs may be
	// called is the caller's allow-list (LEASEHOLD_WEBHOOK_ALLOW).
	Webhook *WebhookTarget `json:"webhook,omitempty"`
}

// WebhookTarget is a submission's webhook.
type WebhookTarget struct {
	URL string `json:"url"`
}

// maxWebhookURL bounds a webhook's URL, which every try sends.
const maxWebhookURL = 2048

// UnmarshalJSON reads exactly {"url": "..."}.
func (w *WebhookTarget) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p struct {
		URL *string `json:"url"`
	}
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf(`webhook must be {"url": "https://..."}: %w`, err)
	}
	if p.URL == nil {
		return fmt.Errorf(`webhook must be {"url": "https://..."}: url is missing`)
	}
	w.URL = *p.URL
	return nil
}

// Address is the URL as the job hash keeps it: "" for a nil target.
func (w *WebhookTarget) Address() string {
	if w == nil {
		return ""
	}
	return w.URL
}

// Cost is what a job expects to spend of its keys' budgets.
type Cost struct {
	Tokens int64 `json:"tokens"` // 1..MaxCostTokens
}

// MaxCostTokens is the largest cost a job may give, and the largest
// estimate of any job (Submission.Tokens).
const MaxCostTokens = 1_000_000_000

// UnmarshalJSON reads exactly {"tokens": N}.
func (c *Cost) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p struct {
		Tokens *int64 `json:"tokens"`
	}
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf(`cost must be {"tokens": N}: %w`, err)
	}
	if p.Tokens == nil {
		return fmt.Errorf(`cost must be {"tokens": N}: tokens is missing`)
	}
	c.Tokens = *p.Tokens
	return nil
}

// Estimating llm.chat's tokens before the call: a prompt's text is about
// four characters a token, each message costs a few more, and a request
// without max_tokens is taken to ask for DefaultMaxTokens. Once the call
// ends, the upstream's usage replaces the estimate.
const (
	DefaultMaxTokens = 1024
	charsPerToken    = 4
	tokensPerMessage = 4
)

// Tokens is what the job is estimated to spend of its keys' tpm budgets,
// from 0 to MaxCostTokens: its cost, else for llm.chat its prompt's and
// max_tokens' tokens, else 0. A claim reserves it; Validate refuses an
// llm.chat input whose estimate is above MaxCostTokens.
func (s Submission) Tokens() int64 {
	if s.Cost != nil {
		return min(max(s.Cost.Tokens, 0), MaxCostTokens)
	}
	if s.Kind != "llm.chat" {
		return 0
	}
	_, total := chatTokens(s.Input)
	return min(total, MaxCostTokens)
}

// ChatPromptTokens is the estimate of an llm.chat input's prompt: what a
// call spent that ended before the upstream reported its usage, beside
// the tokens it streamed.
func ChatPromptTokens(input json.RawMessage) int64 {
	prompt, _ := chatTokens(input)
	return prompt
}

// chatTokens estimates an llm.chat input: prompt is its messages' tokens,
// total adds what the answer may take: max_tokens, or DefaultMaxTokens when
// it gives none (or one the worker refuses: below 1, not an integer). An
// input that is not an llm.chat input, which the worker refuses, is
// estimated at 0. A max_tokens beyond MaxCostTokens, however large, counts
// as MaxCostTokens+1: the sum cannot overflow, and the caller sees it is
// too large.
func chatTokens(input json.RawMessage) (prompt, total int64) {
	var in struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		MaxTokens json.RawMessage `json:"max_tokens"`
	}
	if json.Unmarshal(input, &in) != nil {
		return 0, 0
	}
	// The input is at most maxInputSize bytes: the prompt's estimate is
	// far below what could overflow.
	for _, m := range in.Messages {
		prompt += tokensPerMessage + (int64(len(m.Content))+charsPerToken-1)/charsPerToken
	}
	answer := int64(DefaultMaxTokens)
	n, err := strconv.ParseInt(string(in.MaxTokens), 10, 64)
	switch {
	case err == nil && n > 0:
		answer = min(n, MaxCostTokens+1)
	case errors.Is(err, strconv.ErrRange) && n > 0:
		answer = MaxCostTokens + 1
	}
	return prompt, prompt + answer
}

// FieldError names one invalid field and says what is wrong with it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every invalid field of a request. Nothing was
// written when it is returned.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, f := range e.Errors {
		parts[i] = f.Field + ": " + f.Message
	}
	return "job: invalid request: " + strings.Join(parts, "; ")
}

// Add records that field is refused, and why.
func (e *ValidationError) Add(field, format string, args ...any) {
	e.Errors = append(e.Errors, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err returns e when it holds errors, and a nil error (not a nil
// *ValidationError in an interface) when it does not.
func (e *ValidationError) Err() error {
	if len(e.Errors) == 0 {
		return nil
	}
	return e
}

// Validate checks every field and returns a *ValidationError listing each
// invalid one, or nil. A zero value means the field's default.
func (s Submission) Validate() error {
	return s.validate(nil)
}

// ValidateGiven is Validate for a request whose body named the fields in
// given (by JSON name): there a zero value was written by the client, so
// it is checked as the value it is ({"max_attempts": 0} is refused), and
// only a field the body left out takes its default.
func (s Submission) ValidateGiven(given map[string]bool) error {
	return s.validate(given)
}

func (s Submission) validate(given map[string]bool) error {
	var v ValidationError
	switch {
	case s.Kind == "":
		v.Add("kind", "is required")
	case !kindPattern.MatchString(s.Kind):
		v.Add("kind", "must match %s", kindPattern)
	}
	if (s.Queue != "" || given["queue"]) && !queuePattern.MatchString(s.Queue) {
		v.Add("queue", "must match %s", queuePattern)
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		v.Add("priority", "must be between %d and %d", MinPriority, MaxPriority)
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > maxAttempts || (s.MaxAttempts == 0 && given["max_attempts"]) {
		v.Add("max_attempts", "must be between 1 and %d", maxAttempts)
	}
	checkDuration(&v, "timeout", s.Timeout, maxTimeout, given["timeout"])
	checkDuration(&v, "max_wait", s.MaxWait, 0, given["max_wait"])
	checkDuration(&v, "delay", s.Delay, maxDelay, false) // "0s" is no delay: in range
	if (s.OnBusy != "" || given["on_busy"]) && s.OnBusy != OnBusyQueue && s.OnBusy != OnBusyReject {
		v.Add("on_busy", "must be %q or %q", OnBusyQueue, OnBusyReject)
	}
	if s.Cost != nil && (s.Cost.Tokens < 1 || s.Cost.Tokens > MaxCostTokens) {
		v.Add("cost.tokens", "must be from 1 to %d", MaxCostTokens)
	}
	if s.Webhook != nil {
		if u, err := url.Parse(s.Webhook.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.Add("webhook.url", "must be an absolute http:// or https:// URL")
		} else if len(s.Webhook.URL) > maxWebhookURL {
			v.Add("webhook.url", "longer than %d bytes", maxWebhookURL)
		}
	}
	if len(s.ConcurrencyKeys) > maxConcurrencyKeys {
		v.Add("concurrency_keys", "at most %d keys", maxConcurrencyKeys)
	}
	for i, k := range s.ConcurrencyKeys {
		field := fmt.Sprintf("concurrency_keys[%d]", i)
		switch {
		case !concurrencyKeyPattern.MatchString(k):
			v.Add(field, "must match %s", concurrencyKeyPattern)
		case strings.Contains(k, "*"):
			v.Add(field, "must not contain '*': a job names one limit, '*' is for defining limits")
		}
	}
	switch {
	case len(s.Input) > maxInputSize:
		v.Add("input", "larger than %d bytes", maxInputSize)
	case !absent(s.Input) && !json.Valid(s.Input):
		v.Add("input", "is not valid JSON")
	case s.Kind == "llm.chat":
		if prompt, total := chatTokens(s.Input); total > MaxCostTokens {
			v.Add("input.max_tokens", "must be at most %d less the prompt's estimated %d tokens: a job's estimate is at most %d tokens",
				MaxCostTokens, prompt, MaxCostTokens)
		}
	}
	switch {
	case len(s.Metadata) > maxMetadataSize:
		v.Add("metadata", "larger than %d bytes", maxMetadataSize)
	case absent(s.Metadata):
	case !json.Valid(s.Metadata) || bytes.TrimSpace(s.Metadata)[0] != '{':
		v.Add("metadata", "must be a JSON object")
	}
	return v.Err()
}

// checkDuration refuses a negative d, one above max when max > 0, and a
// zero the client wrote (given) for a field whose zero is not a value.
func checkDuration(v *ValidationError, field string, d Duration, max time.Duration, given bool) {
	switch {
	case d < 0:
		v.Add(field, "must not be negative")
	case d == 0 && given:
		v.Add(field, "must be positive")
	case max > 0 && time.Duration(d) > max:
		v.Add(field, "must be at most %s", max)
	}
}

// ChatModel returns the model an llm.chat submission names, if any; the
// worker refuses a missing or malformed one. It reads the input the worker
// will run, canonical and free of keys that collide when case is ignored,
// and decodes it as the worker does (kinds.parseChat): so the key it
// derives is the model that runs.
func ChatModel(s Submission) (string, bool) {
	if s.Kind != "llm.chat" {
		return "", false
	}
	var in struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(s.Input, &in) != nil || strings.TrimSpace(in.Model) == "" {
		return "", false
	}
	return in.Model, true
}

// absent reports whether raw JSON is missing or null: both mean the default.
func absent(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// Normalize validates s for tenant and returns it with every default
// applied, the tenant's key added, keys sorted and deduplicated, and input
// and metadata in canonical form. Two requests that mean the same job
// normalize to the same value, which is what idempotency compares.
func (s Submission) Normalize(tenant string) (Submission, error) {
	if err := s.Validate(); err != nil {
		return s, err
	}
	own := "tenant:" + tenant
	var v ValidationError
	keys := []string{own}
	for i, k := range s.ConcurrencyKeys {
		// Naming another tenant's key would spend that tenant's quota.
		if strings.HasPrefix(k, "tenant:") && k != own && !strings.HasPrefix(k, own+":") {
			v.Add(fmt.Sprintf("concurrency_keys[%d]", i), "%s is another tenant's key; %s is added for you", k, own)
		}
		keys = append(keys, k)
	}
	var err error
	if absent(s.Input) {
		s.Input = json.RawMessage(`{}`)
	} else {
		var dup []string
		if s.Input, dup, err = canonical(s.Input); err != nil {
			return s, fmt.Errorf("job: input: %w", err)
		}
		if dup != nil {
			v.Add("input", "has the keys %q and %q in one object, which differ only in case: name each once", dup[0], dup[1])
		}
	}
	if model, ok := ChatModel(s); ok {
		// The fleet never exceeds a model's limit: llm.chat is always
		// guarded by its model's key.
		if key := "model:" + model; concurrencyKeyPattern.MatchString(key) {
			keys = append(keys, key)
		} else {
			v.Add("input.model", "cannot name a concurrency key: must match %s after \"model:\"", concurrencyKeyPattern)
		}
	}
	if err := v.Err(); err != nil {
		return s, err
	}
	slices.Sort(keys)
	s.ConcurrencyKeys = slices.Compact(keys)
	s.Queue = cmp.Or(s.Queue, DefaultQueue)
	s.MaxAttempts = cmp.Or(s.MaxAttempts, defaultMaxAttempts)
	s.Timeout = cmp.Or(s.Timeout, Duration(defaultTimeout))
	s.OnBusy = cmp.Or(s.OnBusy, OnBusyQueue)
	if absent(s.Metadata) {
		s.Metadata = nil
	} else if s.Metadata, _, err = canonical(s.Metadata); err != nil {
		return s, fmt.Errorf("job: metadata: %w", err)
	}
	return s, nil
}

// Hash identifies a normalized submission for idempotency.
func (s Submission) Hash() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ValidateTenant checks a tenant name: 1–64 of [a-zA-Z0-9_.-]. The name
// goes into key names and into the concurrency key tenant:<name>, so the
// API should check its configured tenants with it at start.
func ValidateTenant(name string) error {
	if !tenantPattern.MatchString(name) {
		return fmt.Errorf("job: invalid tenant name %q: must match %s", name, tenantPattern)
	}
	return nil
}
