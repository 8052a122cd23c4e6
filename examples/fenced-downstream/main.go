// Command fenced-downstream is a downstream HTTP service behind the fence.
//
// Two workers report a result for job 42. The first took the job over with
// token 7; the second is a worker that was paused past its lease and still
// holds token 5. The service admits the first and refuses the second with
// 409, so the stale worker learns it has lost the job and corrupts nothing.
//
// The service keeps its tokens with fencing.Memory, as it runs as one process
// and shares no Redis with the workers; replicas would share a guard in
// Redis (the store's Fence).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/leasehold/leasehold/fencing"
)

func main() { os.Exit(code(run(context.Background(), os.Stdout))) }

func code(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced-downstream:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, out io.Writer) error {
	mux := http.NewServeMux()
	jobID := func(r *http.Request) string { return r.PathValue("id") }
	mux.Handle("PUT /jobs/{id}/result", fencing.Middleware(new(fencing.Memory), jobID)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(out, "service: stored result %s for job %s\n", body, r.PathValue("id"))
			w.WriteHeader(http.StatusNoContent)
		})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, w := range []struct {
		name   string
		token  fencing.Token
		result string
	}{
		{"new owner", 7, `{"text":"fresh"}`},
		{"paused worker", 5, `{"text":"stale"}`},
	} {
		reply, err := put(ctx, srv.Client(), srv.URL+"/jobs/42/result", w.token, w.result)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s (token %d): %s\n", w.name, w.token, reply)
	}
	return nil
}

// put sends result with token and returns the status line and the body.
func put(ctx context.Context, client *http.Client, url string, token fencing.Token, result string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(result))
	if err != nil {
		return "", err
	}
	fencing.SetHeader(req.Header, token)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(resp.Status + " " + string(body)), err
}
