package fencing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// Header is the HTTP header a fencing token travels in.
const Header = "Fencing-Token"

// ErrNoToken is returned by FromHeader when the request carries no token.
var ErrNoToken = errors.New("fencing: no " + Header + " header")

// retryAfter is the Retry-After, in seconds, of a 503: a guard that cannot
// answer is usually a Redis restart or failover, over within seconds.
const retryAfter = "1"

// SetHeader puts t in h, for a request to a fenced downstream service.
func SetHeader(h http.Header, t Token) { h.Set(Header, t.String()) }

// FromHeader returns the token in h. It returns ErrNoToken when there is
// none, and an error matching ErrInvalid when the value is not a decimal
// integer from 1 to 2^64-1 or the header is repeated (two tokens leave the
// owner unknown).
func FromHeader(h http.Header) (Token, error) {
	vals := h.Values(Header)
	switch len(vals) {
	case 0:
		return 0, ErrNoToken
	case 1:
	default:
		return 0, fmt.Errorf("%w: %d %s headers, want one", ErrInvalid, len(vals), Header)
	}
	n, err := strconv.ParseUint(vals[0], 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: %s %q: a token is a decimal integer from 1 to %d", ErrInvalid, Header, vals[0], uint64(math.MaxUint64))
	}
	return Token(n), nil
}

// Middleware admits a request only if its Fencing-Token passes g for the
// resource that resource(r) names, so a worker that has lost its lease cannot
// act on a downstream service. Refusals are RFC 9457 problem JSON:
//
//   - 400 when the token is missing or malformed, or the resource is empty;
//   - 409 when the token is stale: a newer owner has been seen;
//   - 503 with Retry-After when g cannot answer (Redis down): the request is
//     not admitted, as it would be unfenced.
//
// Admission is a gate, not a lock: a handler admitted with token 7 may still
// be running when token 8 is admitted. A handler whose writes must not land
// out of order writes through a fenced write (the store's Fence.Write), which checks and writes in one
// step. The handler reads the token again with FromHeader if it needs it.
func Middleware(g Guard, resource func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, err := FromHeader(r.Header)
			if err != nil {
				writeProblem(w, http.StatusBadRequest, err.Error())
				return
			}
			err = g.Admit(r.Context(), resource(r), token)
			switch {
			case err == nil:
				next.ServeHTTP(w, r)
			case errors.Is(err, ErrStale):
				writeProblem(w, http.StatusConflict, err.Error())
			case errors.Is(err, ErrInvalid):
				writeProblem(w, http.StatusBadRequest, err.Error())
			default:
				// The cause (often a Redis address) stays out of the
				// response: it is the service's business, not the caller's.
				w.Header().Set("Retry-After", retryAfter)
				writeProblem(w, http.StatusServiceUnavailable, "fencing: the token could not be checked; retry later")
			}
		})
	}
}

// writeProblem answers with an RFC 9457 problem. The type is about:blank, so
// the title is the status text and detail says what went wrong.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	// An encode error means the client is gone; there is no one left to tell.
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, detail})
}
