package ratelimit

import (
	"net/http"
	"strconv"
	"time"
)

// policyName names the one policy a response reports on.
const policyName = `"default"`

// Headers sets the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers from d:
//
//	RateLimit: "default";r=<remaining>;t=<seconds until the quota is back>
//	RateLimit-Policy: "default";q=<limit>;w=<window in seconds>
//
// and, when d refuses the request, Retry-After in whole seconds (at least 1:
// a client told 0 would come straight back). Seconds are rounded up.
func Headers(h http.Header, d Decision) {
	h.Set("RateLimit", policyName+";r="+strconv.Itoa(d.Remaining)+";t="+strconv.FormatInt(seconds(d.Reset), 10))
	h.Set("RateLimit-Policy", d.Policy)
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(max(1, seconds(d.RetryAfter)), 10))
	}
}

// seconds rounds d up to whole seconds, so that waiting that long is enough.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
