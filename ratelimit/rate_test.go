package ratelimit_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/ratelimit"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	good := map[string]ratelimit.Rate{
		"50/s:100": {Limit: 50, Period: time.Second, Burst: 100},
		"50/s":     {Limit: 50, Period: time.Second},
		"600/m":    {Limit: 600, Period: time.Minute},
		"1/h:1":    {Limit: 1, Period: time.Hour, Burst: 1},
	}
	for s, want := range good {
		got, err := ratelimit.ParseRate(s)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), s)
		}
	}
	bad := map[string]string{
		"":          "no /",
		"50":        "no /",
		"50/d":      `unit "d"`,
		"50/":       `unit ""`,
		"50/s:":     `burst ""`,
		"0/s":       `limit "0"`,
		"-5/s":      `limit "-5"`,
		"x/s":       `limit "x"`,
		"50/s:0":    `burst "0"`,
		"50/s:1.5":  `burst "1.5"`,
		"50/s:10:2": `burst "10:2"`,
		" 50/s":     `limit " 50"`,
	}
	for s, why := range bad {
		_, err := ratelimit.ParseRate(s)
		if !errors.Is(err, ratelimit.ErrInvalid) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "e.g. 50/s:100") {
			t.Errorf("ParseRate(%q) = %v; want ErrInvalid saying %s and showing the form", s, err, why)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	cases := map[string]ratelimit.Rate{
		"no limit":         {Period: time.Second},
		"no period":        {Limit: 1},
		"sub-ms period":    {Limit: 1, Period: 500 * time.Microsecond},
		"ns period":        {Limit: 1, Period: time.Second + 1},
		"negative burst":   {Limit: 1, Period: time.Second, Burst: -1},
		"inexact, 2^53 µs": {Limit: 3_000_000, Period: time.Hour},
	}
	for name, r := range cases {
		for _, alg := range algorithms {
			if name == "inexact, 2^53 µs" && (alg.name == "sliding_log" || alg.name == "fixed_window") {
				continue // their scripts never multiply the limit by the period
			}
			if _, err := alg.new(store.New(rdb, store.Config{}), ratelimit.Config{Rate: r}); !errors.Is(err, ratelimit.ErrInvalid) {
				t.Errorf("%s, %s: %v, want ErrInvalid", alg.name, name, err)
			}
		}
	}
	for _, alg := range algorithms {
		if _, err := alg.new(nil, ratelimit.Config{Rate: ratelimit.Rate{Limit: 1, Period: time.Second}}); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%s, nil store: %v, want ErrInvalid", alg.name, err)
		}
		burst := ratelimit.Config{Rate: ratelimit.Rate{Limit: 1, Period: time.Second, Burst: 5}}
		_, err := alg.new(store.New(rdb, store.Config{}), burst)
		if alg.name == "token_bucket" {
			if err != nil {
				t.Errorf("token bucket with a burst: %v", err)
			}
		} else if !errors.Is(err, ratelimit.ErrInvalid) || !strings.Contains(err.Error(), "token bucket only") {
			t.Errorf("%s with a burst: %v, want ErrInvalid saying a burst is for the token bucket only", alg.name, err)
		}
	}
}

func TestAllowRefusesBadInput(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	for _, alg := range algorithms {
		f := newFixture(t, rdb, alg, ratelimit.Rate{Limit: 5, Period: time.Second})
		for _, in := range []struct {
			subject string
			n       int
			why     string
		}{
			{"", 1, "1 to 256 bytes"},
			{strings.Repeat("x", 257), 1, "1 to 256 bytes"},
			{"a{b}", 1, "braces"},
			{"a", 0, "at least 1"},
			{"a", 6, "more than the 5"},
		} {
			d, err := f.l.Allow(t.Context(), in.subject, in.n)
			if !errors.Is(err, ratelimit.ErrInvalid) || !strings.Contains(err.Error(), in.why) || d.Allowed {
				t.Errorf("%s: Allow(%.10q, %d) = %+v, %v; want ErrInvalid saying %s", alg.name, in.subject, in.n, d, err, in.why)
			}
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	ratelimit.Headers(h, ratelimit.Decision{
		Allowed: true, Limit: 100, Remaining: 42, Reset: 1500 * time.Millisecond,
		Policy: `"default";q=50;w=1;burst=100`,
	})
	want := http.Header{
		"Ratelimit":        {`"default";r=42;t=2`},
		"Ratelimit-Policy": {`"default";q=50;w=1;burst=100`},
	}
	if !equalHeaders(h, want) {
		t.Fatalf("allowed: headers %v, want %v", h, want)
	}

	// Refused: Retry-After too, never 0 even when the wait is under a second.
	h = http.Header{}
	ratelimit.Headers(h, ratelimit.Decision{
		Limit: 10, Remaining: 0, Reset: 10 * time.Second, RetryAfter: 20 * time.Millisecond,
		Policy: `"default";q=10;w=60`,
	})
	want = http.Header{
		"Ratelimit":        {`"default";r=0;t=10`},
		"Ratelimit-Policy": {`"default";q=10;w=60`},
		"Retry-After":      {"1"},
	}
	if !equalHeaders(h, want) {
		t.Fatalf("refused: headers %v, want %v", h, want)
	}

	// A refusal that names no wait (a Limiter of the caller's own) still
	// sends the client away for a second.
	h = http.Header{}
	ratelimit.Headers(h, ratelimit.Decision{Limit: 10, Policy: `"default";q=10;w=60`})
	if got := h.Get("Retry-After"); got != "1" {
		t.Fatalf("refused with no RetryAfter: Retry-After %q, want 1", got)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if len(a[k]) != 1 || a[k][0] != v[0] {
			return false
		}
	}
	return true
}

// The policy a limiter reports is the one it enforces.
func TestPolicy(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client(t)
	want := map[string]string{
		"token_bucket":   `"default";q=50;w=1;burst=100`,
		"sliding_log":    `"default";q=50;w=1`,
		"sliding_window": `"default";q=50;w=1`,
		"fixed_window":   `"default";q=50;w=1`,
	}
	for _, alg := range algorithms {
		r := ratelimit.Rate{Limit: 50, Period: time.Second}
		if alg.name == "token_bucket" {
			r.Burst = 100
		}
		f := newFixture(t, rdb, alg, r)
		c := f.mustAllow("a", 1)
		if c.d.Policy != want[alg.name] {
			t.Errorf("%s: policy %s, want %s", alg.name, c.d.Policy, want[alg.name])
		}
		if wantLimit := max(r.Limit, r.Burst); c.d.Limit != wantLimit {
			t.Errorf("%s: limit %d, want %d", alg.name, c.d.Limit, wantLimit)
		}
	}
}
