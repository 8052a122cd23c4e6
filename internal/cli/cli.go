// Package cli is what Leasehold's binaries share: flags that default to
// environment variables, exit codes, and the Redis and NATS connections
// with the checks every process makes at start.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/run"

	"github.com/leasehold/leasehold/job"
)

// Flags is a flag set whose flags default to environment variables: a flag
// given on the command line wins over its variable, which wins over the
// built-in default.
type Flags struct {
	*flag.FlagSet
	errs []error
}

// NewFlags returns an empty flag set for the command name.
func NewFlags(name string, out io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &Flags{FlagSet: fs}
}

func (f *Flags) env(env, def string) string {
	if v, ok := os.LookupEnv(env); ok {
		return v
	}
	return def
}

// String defines a string flag name, defaulting to $env, then def.
func (f *Flags) String(name, env, def, usage string) *string {
	return f.FlagSet.String(name, f.env(env, def), usage+" ($"+env+")")
}

// Secret defines a string flag whose value the usage text never shows:
// -h would otherwise print what $env holds.
func (f *Flags) Secret(name, env, usage string) *string {
	p := f.String(name, env, "", usage)
	f.Lookup(name).DefValue = ""
	return p
}

// URL defines a URL flag whose usage text shows its default with any
// password replaced (see Redact).
func (f *Flags) URL(name, env, def, usage string) *string {
	p := f.String(name, env, def, usage)
	f.Lookup(name).DefValue = Redact(*p)
	return p
}

// Bool defines a bool flag name, defaulting to $env (1, true, 0, false...), then def.
func (f *Flags) Bool(name, env string, def bool, usage string) *bool {
	v := def
	if s := f.env(env, ""); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s=%q: want 1 or 0, true or false", env, s))
		}
		v = b
	}
	return f.FlagSet.Bool(name, v, usage+" ($"+env+")")
}

// Int defines an int flag name, defaulting to $env, then def.
func (f *Flags) Int(name, env string, def int, usage string) *int {
	v := def
	if s := f.env(env, ""); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s=%q: not an integer", env, s))
		}
		v = n
	}
	return f.FlagSet.Int(name, v, usage+" ($"+env+")")
}

// Duration defines a duration flag name, defaulting to $env, then def.
func (f *Flags) Duration(name, env string, def time.Duration, usage string) *time.Duration {
	v := def
	if s := f.env(env, ""); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s=%q: not a duration like 30s", env, s))
		}
		v = d
	}
	return f.FlagSet.Duration(name, v, usage+" ($"+env+")")
}

// Retention defines the flag the API and the worker share: how long a job,
// its events and its listing entries are kept after it ends.
func (f *Flags) Retention() *time.Duration {
	return f.Duration("retention", "LEASEHOLD_RETENTION", job.DefaultRetention,
		"how long a job is kept after it ends; the API's must be at least the 24h an Idempotency-Key lives")
}

// Handlers defines the flag the worker and the dev mode share: the kinds
// served by remote HTTP handlers, read with remote.ParseHandlers. It is a
// secret: a handler's URL may carry credentials.
func (f *Flags) Handlers() *string {
	return f.Secret("handlers", "LEASEHOLD_HANDLERS", "comma-separated kind=url pairs: kinds served by remote HTTP handlers")
}

// Parse parses args and reports bad environment values too.
func (f *Flags) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	return errors.Join(f.errs...)
}

// List splits a comma-separated value, dropping empty items.
func List(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Code turns run's error into an exit code, printing it (as Text: an
// error can quote what an API answered): a signal or -help is a clean
// exit.
func Code(name string, err error) int {
	switch {
	case err == nil, errors.Is(err, run.ErrSignal), errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(Text(os.Stderr), "%s: %v\n", name, err)
		return 1
	}
}

// Logger logs text lines to w.
func Logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// NATS connects to url and keeps reconnecting forever. NATS is only the
// fast path (wake-ups, cancels), so a process starts even while NATS is
// down and catches up when it comes back.
func NATS(url, name string, log *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if !nc.IsClosed() { // closing on purpose is no outage
				log.Warn("nats disconnected; cancels and wake-ups fall back to polling", "error", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
	)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", Redact(url), redactErr(err, url))
	}
	return nc, nil
}
