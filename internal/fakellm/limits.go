package fakellm

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Window is the span of the rolling RPM and TPM windows.
const Window = time.Minute

// CapacityModel begins the name of a model that answers at most N
// requests at once, N its name's end: "fake-capacity-4".
const CapacityModel = "fake-capacity-"

// modelCapacity is how many requests at once model allows: the N of
// CapacityModel's names, 1 to 1000; 0 for any other model.
func modelCapacity(model string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(model, CapacityModel))
	if !strings.HasPrefix(model, CapacityModel) || err != nil || n < 1 || n > 1000 {
		return 0
	}
	return n
}

// Limits are the upstream's hidden limits: what it enforces and tells
// nobody in advance. A zero field is no limit. Set them with Config.Limits
// or, at run time, SetLimits; the product under test must learn them from
// the answers only.
type Limits struct {
	// Concurrency is how many admitted requests it answers at once; a
	// request beyond them is refused.
	Concurrency int
	// RPM is how many requests it admits in any rolling minute.
	RPM int
	// TPM is how many tokens it admits in any rolling minute, counted as
	// OpenAI bills them: a request's prompt tokens plus its answer's
	// completion tokens (usage.total_tokens), when it is admitted. A
	// request larger than TPM is never admitted.
	TPM int
	// Status is the status of a refusal: 429 (default), or 503 for an
	// upstream that answers overload as unavailable.
	Status int
	// RetryAfter is the wait a refusal over Concurrency advises, since no
	// one knows when a call ends; default 1s. A refusal over RPM or TPM
	// advises the time until the request fits.
	RetryAfter time.Duration
}

// Stats are the server's counts, for tests to read.
type Stats struct {
	// Calls counts requests on a completions path, refused ones included.
	Calls int
	// Refused counts the calls the hidden limits refused (429, or
	// Limits.Status); FailNext's canned errors are not among them.
	Refused int
	// Serving is how many admitted calls are being answered now, and
	// PeakServing the most at once: never above Limits.Concurrency while
	// it is in force.
	Serving, PeakServing int
	// RequestsLastMinute and TokensLastMinute are what the rolling
	// windows hold now: the calls admitted in the last Window, and their
	// tokens.
	RequestsLastMinute, TokensLastMinute int
	// Busy is Serving, at most Limits.Concurrency when set, integrated
	// over wall-clock time (time.Now, not Config.Clock) since the server
	// started: the call-time it served within its capacity. (Calls
	// admitted before the capacity was lowered run on above it, and are
	// not counted above it.) Its growth over a span, divided by the span
	// times Concurrency, is the share of the capacity used.
	Busy time.Duration
}

// admitted is one admitted request in the rolling windows.
type admitted struct {
	at     time.Time
	tokens int
}

// SetLimits replaces the hidden limits; requests already admitted run on.
func (s *Server) SetLimits(l Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account()
	s.limits = l
}

// Stats returns the server's counts now.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(s.cfg.Clock())
	s.account()
	return Stats{
		Calls: len(s.requests), Refused: s.refused, Serving: s.serving, PeakServing: s.peakServing,
		RequestsLastMinute: len(s.window), TokensLastMinute: s.windowTokens(), Busy: s.busy,
	}
}

// admit lets a request of tokens tokens in under the hidden limits, or
// returns the refusal to answer, with the wait it advises in h's
// retry-after-ms and the Failure's Retry-After. Either way it sets OpenAI's
// x-ratelimit-* headers for the limits in force on h.
func (s *Server) admit(h http.Header, tokens int, model string) *Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock()
	s.forget(now)
	l := s.limits
	capacity := modelCapacity(model)
	modelFull := capacity > 0 && s.modelServing[model] >= capacity
	full := l.Concurrency > 0 && s.serving >= l.Concurrency || modelFull
	requests, toks := s.requestsWait(now), s.tokensWait(now, tokens)
	if full || requests > 0 || toks > 0 {
		s.refused++
		s.rateHeaders(h, now, tokens)
		f := &Failure{Status: cmp.Or(l.Status, http.StatusTooManyRequests)}
		switch {
		case toks > 0:
			f.Message = "Rate limit reached for tokens per min (TPM): Limit " + strconv.Itoa(l.TPM) +
				", Used " + strconv.Itoa(s.windowTokens()) + ", Requested " + strconv.Itoa(tokens) + "."
		case requests > 0:
			f.Message = "Rate limit reached for requests per min (RPM): Limit " + strconv.Itoa(l.RPM) + "."
		case modelFull:
			f.Message = "Too many concurrent requests for " + model + ": Limit " + strconv.Itoa(capacity) + "."
		default:
			f.Message = "Too many concurrent requests: Limit " + strconv.Itoa(l.Concurrency) + "."
		}
		wait := max(requests, toks)
		if full {
			wait = max(wait, cmp.Or(l.RetryAfter, time.Second))
		}
		f.RetryAfter = strconv.FormatInt(int64(ceil(wait, time.Second)/time.Second), 10)
		h.Set("retry-after-ms", strconv.FormatInt(int64(ceil(wait, time.Millisecond)/time.Millisecond), 10))
		return f
	}
	s.window = append(s.window, admitted{at: now, tokens: tokens})
	s.account()
	s.serving++
	s.peakServing = max(s.peakServing, s.serving)
	if capacity > 0 {
		if s.modelServing == nil {
			s.modelServing = map[string]int{}
		}
		s.modelServing[model]++
	}
	s.rateHeaders(h, now, tokens)
	return nil
}

// served ends an admitted request's hold on the concurrency.
func (s *Server) served(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account()
	s.serving--
	if modelCapacity(model) > 0 {
		if s.modelServing[model]--; s.modelServing[model] == 0 {
			delete(s.modelServing, model)
		}
	}
}

// account adds the call-time served within the capacity since the last
// change of serving or of the limits to busy; it runs before every such
// change, with mu held.
func (s *Server) account() {
	now := time.Now()
	if !s.since.IsZero() {
		n := s.serving
		if s.limits.Concurrency > 0 {
			n = min(n, s.limits.Concurrency)
		}
		s.busy += time.Duration(n) * now.Sub(s.since)
	}
	s.since = now
}

// forget drops what has left the windows by now.
func (s *Server) forget(now time.Time) {
	i := 0
	for i < len(s.window) && !now.Before(s.window[i].at.Add(Window)) {
		i++
	}
	s.window = s.window[i:]
}

func (s *Server) windowTokens() int {
	n := 0
	for _, a := range s.window {
		n += a.tokens
	}
	return n
}

// requestsWait is how long until the request window has room for one
// more request: 0 if it has room now.
func (s *Server) requestsWait(now time.Time) time.Duration {
	rpm := s.limits.RPM
	if rpm <= 0 || len(s.window) < rpm {
		return 0
	}
	// RPM may have been lowered below what the window holds.
	return s.window[len(s.window)-rpm].at.Add(Window).Sub(now)
}

// tokensWait is how long until the token window has room for n more
// tokens: 0 if it has room now, a whole Window if it never will (n > TPM).
func (s *Server) tokensWait(now time.Time, n int) time.Duration {
	tpm := s.limits.TPM
	if tpm <= 0 {
		return 0
	}
	if n > tpm {
		return Window
	}
	used := s.windowTokens()
	if used+n <= tpm {
		return 0
	}
	for _, a := range s.window {
		if used -= a.tokens; used+n <= tpm {
			return a.at.Add(Window).Sub(now)
		}
	}
	return Window // not reached: an empty window has room for n <= tpm
}

// rateHeaders sets OpenAI's x-ratelimit-* headers for the RPM and TPM in
// force. remaining is what the window has left; reset is how long until a
// request like this one (one request, tokens tokens) fits, "0s" if it
// would now.
func (s *Server) rateHeaders(h http.Header, now time.Time, tokens int) {
	if rpm := s.limits.RPM; rpm > 0 {
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(rpm))
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(max(rpm-len(s.window), 0)))
		h.Set("x-ratelimit-reset-requests", resetFormat(s.requestsWait(now)))
	}
	if tpm := s.limits.TPM; tpm > 0 {
		h.Set("x-ratelimit-limit-tokens", strconv.Itoa(tpm))
		h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(max(tpm-s.windowTokens(), 0)))
		h.Set("x-ratelimit-reset-tokens", resetFormat(s.tokensWait(now, tokens)))
	}
}

// resetFormat formats d as OpenAI's x-ratelimit-reset-* headers do, which
// is Go's time.Duration format in whole milliseconds: "20ms", "1s",
// "1.5s", "6m0s". It rounds up, so a wait is never understated.
func resetFormat(d time.Duration) string {
	return ceil(max(d, 0), time.Millisecond).String()
}

// ceil rounds d up to a multiple of unit.
func ceil(d, unit time.Duration) time.Duration { return (d + unit - 1) / unit * unit }
