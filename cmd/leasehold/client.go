package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// defaultURL is where the CLI finds the API when neither --url nor
// $LEASEHOLD_URL says: where `leasehold dev` serves it.
const defaultURL = "http://127.0.0.1:8080"

// requestTimeout bounds one request of a command that is not a stream; a
// bulk retry may work for a minute on the server.
const requestTimeout = 90 * time.Second

// usageError is a command line the CLI cannot run: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// apiError is an answer of the API other than 2xx: its problem detail.
type apiError struct {
	Status int
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	for _, f := range e.Errors {
		msg += fmt.Sprintf("\n  %s: %s", f.Field, f.Message)
	}
	return msg
}

// command is what every subcommand shares: its flags, the connection to
// the API, and where its output goes.
type command struct {
	fs     *flag.FlagSet
	url    *string
	key    *string
	output *string
	stdout io.Writer
	stderr io.Writer
	http   *http.Client
}

// newCommand returns a command named name whose flags include the
// connection (--url, --key) and the output format (-o). The key's flag has
// no default shown: $LEASEHOLD_KEY is read only when it runs, so -h never
// prints a secret.
func newCommand(name string, stdout, stderr io.Writer) *command {
	fs := flag.NewFlagSet("leasehold "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &command{
		fs:     fs,
		url:    fs.String("url", "", "API URL (default $LEASEHOLD_URL, else "+defaultURL+")"),
		key:    fs.String("key", "", "API key (default $LEASEHOLD_KEY)"),
		output: fs.String("o", "table", "output: table (for people) or json (for scripts)"),
		stdout: stdout,
		stderr: stderr,
		http:   &http.Client{},
	}
}

// parse parses args, flags and positional arguments in any order, and
// checks that there are want positional arguments (-1: any number).
func (c *command) parse(args []string, want int, names string) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if want >= 0 && len(pos) != want {
		return nil, usagef("usage: %s [flags] %s", c.fs.Name(), names)
	}
	if *c.output != "table" && *c.output != "json" {
		return nil, usagef("-o %s: want table or json", *c.output)
	}
	return pos, nil
}

func (c *command) json() bool { return *c.output == "json" }

func (c *command) base() string {
	return strings.TrimRight(cmp.Or(*c.url, os.Getenv("LEASEHOLD_URL"), defaultURL), "/")
}

// request builds a request of the API at path with body (nil for none),
// marshalled to JSON.
func (c *command) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, r)
	if err != nil {
		return nil, err
	}
	if key := cmp.Or(*c.key, os.Getenv("LEASEHOLD_KEY")); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// call sends a request and returns the body of a 2xx answer; any other
// answer is an *apiError.
func (c *command) call(ctx context.Context, method, path string, body any) ([]byte, error) {
	b, _, err := c.exchange(ctx, method, path, body)
	return b, err
}

// exchange is call, with how long the answer's Retry-After asks to wait
// (0 when it has none), on a 2xx answer as on an error.
func (c *command) exchange(ctx context.Context, method, path string, body any) ([]byte, time.Duration, error) {
	ctx, stop := context.WithTimeout(ctx, requestTimeout)
	defer stop()
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, err
	}
	wait := time.Duration(0)
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		wait = time.Duration(secs) * time.Second
	}
	if resp.StatusCode/100 != 2 {
		return nil, wait, problemOf(resp.StatusCode, b)
	}
	return b, wait, nil
}

// do sends req; an API that cannot be reached is said so, with what to
// check, instead of as the network error alone.
func (c *command) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return nil, fmt.Errorf("cannot reach the API at %s: is it running? (make run starts one; --url or $LEASEHOLD_URL names another): %w", c.base(), op.Err)
	}
	return resp, err
}

// adminOnly turns the API's answer to a tenant that called an admin-only
// route, a 404 for no resource, into what the user needs to know; any
// other error is returned as it is.
func adminOnly(err error) error {
	if e := (*apiError)(nil); errors.As(err, &e) && e.Status == http.StatusNotFound && e.Detail == "no such resource" {
		return errors.New("this command needs the admin key: give it with --key, or set LEASEHOLD_KEY to it (the API answered 404 to this key)")
	}
	return err
}

// problemOf reads an error answer's problem, or names its status alone.
func problemOf(status int, body []byte) *apiError {
	e := &apiError{}
	_ = json.Unmarshal(body, e) // a body that is not a problem leaves the status alone
	e.Status = status
	return e
}

// get calls the API and decodes a 2xx answer into v; with -o json it
// prints the answer as the API sent it instead (v is still decoded).
func (c *command) get(ctx context.Context, method, path string, body, v any) error {
	b, err := c.call(ctx, method, path, body)
	if err != nil {
		return err
	}
	if c.json() {
		if _, err := c.stdout.Write(b); err != nil {
			return err
		}
	}
	if v == nil || len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// escape is one path segment.
func escape(s string) string { return url.PathEscape(s) }
