// Command fakellm serves the fake OpenAI-compatible upstream of package
// fakellm, for trying llm.chat jobs without a real model:
//
//	go run ./internal/fakellm/cmd/fakellm --addr 127.0.0.1:8090 --delay 50ms --tokens 40
//	LEASEHOLD_LLM_BASE_URL=http://127.0.0.1:8090/v1 go run ./cmd/worker
//
// --concurrency, --rpm and --tpm give it hidden limits (package fakellm,
// Hidden limits), which it answers with 429 (or --refuse-status 503) and
// OpenAI's rate-limit headers; --answer-tokens makes every answer that
// long whatever max_tokens asks:
//
//	go run ./internal/fakellm/cmd/fakellm --concurrency 5 --tpm 20000 --answer-tokens 20
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
	answer := fs.Int("answer-tokens", "FAKELLM_ANSWER_TOKENS", 0, "tokens every answer has, cut short by a lower max_tokens (default: max_tokens, or --tokens)")
	concurrency := fs.Int("concurrency", "FAKELLM_CONCURRENCY", 0, "hidden limit: requests answered at once (default: none)")
	rpm := fs.Int("rpm", "FAKELLM_RPM", 0, "hidden limit: requests admitted in any rolling minute (default: none)")
	tpm := fs.Int("tpm", "FAKELLM_TPM", 0, "hidden limit: prompt plus completion tokens admitted in any rolling minute (default: none)")
	status := fs.Int("refuse-status", "FAKELLM_REFUSE_STATUS", 429, "status of a request refused by a hidden limit: 429 or 503")
	retryAfter := fs.Duration("retry-after", "FAKELLM_RETRY_AFTER", time.Second, "wait a refusal over --concurrency advises")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokens < 1 || *delay < 0 || *answer < 0 || *concurrency < 0 || *rpm < 0 || *tpm < 0 || *retryAfter <= 0 {
		return errors.New("--tokens must be at least 1, --retry-after above 0, and --delay, --answer-tokens, --concurrency, --rpm and --tpm not negative")
	}
	if *status != http.StatusTooManyRequests && *status != http.StatusServiceUnavailable {
		return fmt.Errorf("--refuse-status %d: must be 429 or 503", *status)
	}
	fake := fakellm.New(fakellm.Config{
		Tokens: *tokens, Delay: *delay, APIKey: *apiKey, AnswerTokens: *answer,
		Limits: fakellm.Limits{Concurrency: *concurrency, RPM: *rpm, TPM: *tpm, Status: *status, RetryAfter: *retryAfter},
	})
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
