package ratelimit

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a limit of Limit requests per Period. For a token bucket it is the
// refill rate, and Burst the bucket's capacity (0 means Limit).
type Rate struct {
	Limit  int
	Period time.Duration
	Burst  int
}

// units are the periods ParseRate knows, by their letter.
var units = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// ParseRate reads a rate in the LEASEHOLD_RATE form: "<limit>/<unit>", or
// "<limit>/<unit>:<burst>", with unit s, m or h. "50/s:100" is 50 per second
// with a burst of 100.
func ParseRate(s string) (Rate, error) {
	bad := func(why string) (Rate, error) {
		return Rate{}, fmt.Errorf("%w: rate %q: %s (want <limit>/<unit>[:<burst>], unit s, m or h, e.g. 50/s:100)", ErrInvalid, s, why)
	}
	limit, rest, ok := strings.Cut(s, "/")
	if !ok {
		return bad("no /")
	}
	unit, burst, hasBurst := strings.Cut(rest, ":")
	r := Rate{Period: units[unit]}
	if r.Period == 0 {
		return bad(fmt.Sprintf("unit %q is not s, m or h", unit))
	}
	var err error
	if r.Limit, err = strconv.Atoi(limit); err != nil || r.Limit < 1 {
		return bad(fmt.Sprintf("limit %q is not a whole number of at least 1", limit))
	}
	if hasBurst {
		if r.Burst, err = strconv.Atoi(burst); err != nil || r.Burst < 1 {
			return bad(fmt.Sprintf("burst %q is not a whole number of at least 1", burst))
		}
	}
	return r, nil
}

// String gives r in ParseRate's form; a period ParseRate has no letter for
// (a test's 300ms) is written out.
func (r Rate) String() string {
	unit := r.Period.String()
	for u, d := range units {
		if d == r.Period {
			unit = u
		}
	}
	s := strconv.Itoa(r.Limit) + "/" + unit
	if r.Burst != 0 {
		s += ":" + strconv.Itoa(r.Burst)
	}
	return s
}

func (r Rate) validate() error {
	switch {
	case r.Limit < 1:
		return fmt.Errorf("%w: rate %v: limit must be at least 1", ErrInvalid, r)
	case r.Period < time.Millisecond || r.Period%time.Microsecond != 0:
		// Redis expires keys in milliseconds and the scripts count µs.
		return fmt.Errorf("%w: rate %v: period must be at least 1ms and a whole number of µs", ErrInvalid, r)
	case r.Burst < 0:
		return fmt.Errorf("%w: rate %v: burst must not be negative", ErrInvalid, r)
	}
	return nil
}

func (r Rate) burst() int { return cmp.Or(r.Burst, r.Limit) }

// policy is the RateLimit-Policy value (draft-ietf-httpapi-ratelimit-headers):
// quota q per window w, in whole seconds rounded up, plus the bucket's burst.
func (r Rate) policy(bucket bool) string {
	s := fmt.Sprintf("%s;q=%d;w=%d", policyName, r.Limit, seconds(r.Period))
	if bucket {
		s += ";burst=" + strconv.Itoa(r.burst())
	}
	return s
}
