package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// The flags reach the fake: a second call in the minute over --rpm 1 is
// refused with the status and headers asked for.
func TestFlagsSetTheHiddenLimits(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--addr", "127.0.0.1:0", "--delay", "0s", "--rpm", "1", "--refuse-status", "503", "--answer-tokens", "3"}, &stderr)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	}()
	addr := regexp.MustCompile(`http://(\S+)/v1/chat/completions`)
	testenv.Eventually(t, 10*time.Second, func() bool { return addr.MatchString(stderr.String()) }, "fakellm never said where it serves: %q", stderr.String())
	url := addr.FindString(stderr.String())
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":300}`
	var statuses []int
	for range 2 {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		_ = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.Header.Get("x-ratelimit-limit-requests") != "1" {
			t.Fatalf("headers %v: --rpm not in force", resp.Header)
		}
		if resp.StatusCode == 200 && c.Usage.CompletionTokens != 3 {
			t.Fatalf("%d completion tokens, want --answer-tokens 3", c.Usage.CompletionTokens)
		}
	}
	if statuses[0] != 200 || statuses[1] != 503 {
		t.Fatalf("statuses %v, want 200 then 503", statuses)
	}
}
