// Command fakellm serves the fake OpenAI-compatible upstream of package
// fakellm, for trying llm.chat jobs without a real model:
//
//	go run ./internal/fakellm/cmd/fakellm --addr 127.0.0.1:8090 --delay 50ms --tokens 40
//	LEASEHOLD_LLM_BASE_URL=http://127.0.0.1:8090/v1 go run ./cmd/worker
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/fakellm"
)

func main() { os.Exit(cli.Code("fakellm", serve(context.Background(), os.Args[1:], os.Stderr))) }

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := cli.NewFlags("fakellm", stderr)
	addr := fs.String("addr", "FAKELLM_ADDR", "127.0.0.1:8090", "listen address")
	delay := fs.Duration("delay", "FAKELLM_DELAY", 50*time.Millisecond, "wait before each streamed token")
	tokens := fs.Int("tokens", "FAKELLM_TOKENS", 40, "tokens per completion when a request sets no max_tokens")
	apiKey := fs.String("api-key", "FAKELLM_API_KEY", "", "API key clients must send as a Bearer token (default: none checked)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokens < 1 || *delay < 0 {
		return errors.New("--tokens must be at least 1 and --delay not negative")
	}
	fake := fakellm.New(fakellm.Config{Tokens: *tokens, Delay: *delay, APIKey: *apiKey})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "fakellm: serving http://%s/v1/chat/completions (%d tokens, %v apart)\n", ln.Addr(), *tokens, *delay)

	var g run.Group
	g.Add(func() error { return srv.Serve(ln) }, func(error) {
		fake.Close()
		shutdown, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		_ = srv.Shutdown(shutdown)
	})
	g.Add(run.SignalHandler(ctx, syscall.SIGINT, syscall.SIGTERM))
	return g.Run()
}
