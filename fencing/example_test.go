package fencing_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/leasehold/leasehold/fencing"
)

// A downstream service admits a worker's request only while its token is the
// newest it has seen for the job: the worker with token 5 lost its lease to
// the one with token 7, so it is refused.
func ExampleMiddleware() {
	guard := new(fencing.Memory)
	mux := http.NewServeMux()
	mux.Handle("PUT /jobs/{id}/result", fencing.Middleware(guard, func(r *http.Request) string { return r.PathValue("id") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, _ := fencing.FromHeader(r.Header) // admitted, so it parses
			fmt.Fprintf(w, "stored for token %d", token)
		})))

	for _, token := range []fencing.Token{7, 5} {
		req := httptest.NewRequest(http.MethodPut, "/jobs/42/result", strings.NewReader(`{"text":"done"}`))
		fencing.SetHeader(req.Header, token)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Content-Type"), strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 text/plain; charset=utf-8 stored for token 7
	// 409 application/problem+json {"type":"about:blank","title":"Conflict","status":409,"detail":"fencing: stale token 5 for \"42\": highest seen is 7"}
}

func ExampleFromHeader() {
	for _, v := range []string{"42", "", "-1"} {
		h := http.Header{}
		if v != "" {
			h.Set(fencing.Header, v)
		}
		token, err := fencing.FromHeader(h)
		fmt.Println(token, err)
	}
	// Output:
	// 42 <nil>
	// 0 fencing: no Fencing-Token header
	// 0 fencing: invalid input: Fencing-Token "-1": a token is a decimal integer from 1 to 18446744073709551615
}
