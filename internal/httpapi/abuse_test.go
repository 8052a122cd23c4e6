package httpapi_test

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
)

// TestSlowBodyGets408 trickles a submit body one byte at a time, for as
// long as the server lets it: the server answers 408 once BodyTimeout has
// passed, instead of waiting for the body with no limit.
func TestSlowBodyGets408(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *httpapi.Config) { c.BodyTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"kind":"echo","input":{"pad":"` + strings.Repeat("x", 1000) + `"}}`
	if _, err := conn.Write([]byte("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			answered <- resp
		}
		close(answered)
	}()
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		select {
		case resp, ok := <-answered:
			if !ok {
				t.Fatal("the connection closed without an answer")
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("answer %d %s, want a 408 problem", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			return
		case <-deadline:
			t.Fatal("no answer after 30s of a trickled body: the server waits for it with no limit")
		case <-time.After(100 * time.Millisecond):
		}
		if i < len(body)-1 { // never the last byte
			_, _ = conn.Write([]byte{body[i]})
		}
	}
}
