package cancel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var requestScript = scripts.Load("cancel_request.lua")

// ErrRequested is the cause a watched context carries once cancellation of
// its id was requested: context.Cause(ctx) == ErrRequested.
var ErrRequested = errors.New("cancel: requested")

// ErrInvalid is wrapped by every error about bad input (id, ttl, config), so
// callers can tell a request to fix from a backend to retry.
var ErrInvalid = errors.New("cancel: invalid argument")

// MaxIDLen is the longest id, in bytes, that Request, Check and CheckPipe accept.
const MaxIDLen = 255

const defaultSubject = "leasehold.cancel"

// Log attribute keys.
const (
	attrID         = "cancel_id"
	attrNATSStatus = "nats_status"
	attrErr        = "err"
	attrVia        = "via" // "nats" or "flag": which path cancelled
	attrCount      = "count"
)

// Config configures Flags. The zero value is ready to use.
type Config struct {
	// Prefix starts every Redis key; default keys.DefaultPrefix. Requesters
	// and watchers must agree on it.
	Prefix string
	// Subject is the NATS subject requests are published on; default
	// "leasehold.cancel". Requesters and watchers must agree on it.
	Subject string
	// Logger receives warnings about publishes that did not happen; default
	// slog.Default(), so a degraded fast path is never silent.
	Logger *slog.Logger
}

// Flags requests cancellation and reads whether it was requested. It is
// safe for concurrent use.
type Flags struct {
	rdb     redis.UniversalClient
	nc      *nats.Conn
	keys    keys.Space
	subject string
	log     *slog.Logger
}

// New returns Flags that write to rdb and publish on nc. nc may be nil: then
// nothing is published and watchers learn of requests by polling alone.
func New(rdb redis.UniversalClient, nc *nats.Conn, cfg Config) (*Flags, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	subject := cmp.Or(cfg.Subject, defaultSubject)
	if err := validSubject(subject); err != nil {
		return nil, err
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	if nc == nil {
		// Said once here rather than at every request: no connection is a
		// configuration, not a failure.
		log.Info("cancel: no NATS connection; watchers see requests at their next poll")
	}
	return &Flags{rdb: rdb, nc: nc, keys: keys.New(cfg.Prefix), subject: subject, log: log}, nil
}

// Request asks every execution of id to stop. It writes the flag first and
// only then publishes id on NATS, so no message ever announces a request
// that Redis does not hold, and a lost message only delays cancellation
// until the next poll. The flag lives at least ttl, which should cover every
// time id can still run; requesting again never shortens it. A Redis error
// fails the request and publishes nothing; a NATS error is logged (warn) and
// does not fail it.
func (f *Flags) Request(ctx context.Context, id string, ttl time.Duration) error {
	if err := validID(id); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: ttl %v: must be positive", ErrInvalid, ttl)
	}
	// Round up: the flag must live at least ttl, never a fraction of a ms less.
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	if err := requestScript.Run(ctx, f.rdb, []string{f.keys.CancelFlag(id)}, int64(ms)).Err(); err != nil {
		return fmt.Errorf("cancel: write flag: %w", err)
	}
	f.publish(ctx, id)
	return nil
}

// publish sends the fast-path message. It never blocks on NATS and never
// fails the request: the flag is already written.
func (f *Flags) publish(ctx context.Context, id string) {
	if f.nc == nil {
		return
	}
	// While reconnecting, nats.go would buffer the message and send it
	// minutes later; by then pollers have found the flag, so skip it and say so.
	if st := f.nc.Status(); st != nats.CONNECTED {
		f.log.WarnContext(ctx, "cancel: request not published, NATS not connected; watchers see the flag at their next poll",
			attrID, id, attrNATSStatus, st.String())
		return
	}
	if err := f.nc.Publish(f.subject, []byte(id)); err != nil {
		f.log.WarnContext(ctx, "cancel: request not published; watchers see the flag at their next poll",
			attrID, id, attrErr, err)
	}
}

// Check reports whether cancellation of id has been requested and its flag
// has not expired yet.
func (f *Flags) Check(ctx context.Context, id string) (bool, error) {
	if err := validID(id); err != nil {
		return false, err
	}
	n, err := f.rdb.Exists(ctx, f.keys.CancelFlag(id)).Result()
	if err != nil {
		return false, fmt.Errorf("cancel: read flag: %w", err)
	}
	return n == 1, nil
}

// RequestedAt returns when cancellation of id was first requested, on
// Redis's clock, read from its flag under prefix ("" for the default). It is
// the zero time when the flag is gone or predates the flag recording it.
// Workers measure cancel latency from it.
func RequestedAt(ctx context.Context, rdb redis.UniversalClient, prefix, id string) (time.Time, error) {
	v, err := rdb.Get(ctx, keys.New(prefix).CancelFlag(id)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("cancel: read flag: %w", err)
	case v <= 1: // "1": written before the time was recorded
		return time.Time{}, nil
	}
	return time.UnixMilli(v), nil
}

// Clear removes the flags of ids under prefix ("" for the default), in one
// round trip: a job run again (retried) or forgotten (deleted) must not be
// stopped by a request made of its earlier run. Each flag has a hash slot
// of its own, so on a Redis Cluster the pipeline goes out to each node.
func Clear(ctx context.Context, rdb redis.UniversalClient, prefix string, ids ...string) error {
	ks := keys.New(prefix)
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Del(ctx, ks.CancelFlag(id))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("cancel: clear flags: %w", err)
	}
	return nil
}

// CheckPipe queues the read of id's flag (EXISTS) into p, so a heartbeat
// learns of a cancel request in the same round trip as its renew. After
// p.Exec, Val() == 1 means cancellation was requested. The flag has a hash
// slot of its own, so it cannot join the renew script itself; on a Redis
// Cluster the pipeline still goes out to each node at once. A bad id is not
// queued: the returned command carries an ErrInvalid error instead.
func (f *Flags) CheckPipe(ctx context.Context, p redis.Pipeliner, id string) *redis.IntCmd {
	if err := validID(id); err != nil {
		cmd := redis.NewIntCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return p.Exists(ctx, f.keys.CancelFlag(id))
}

// validID refuses ids that would be unreadable in logs or change the flag
// key's hash tag (braces).
func validID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: id is empty", ErrInvalid)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: id is %d bytes, at most %d allowed", ErrInvalid, len(id), MaxIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: id %q is not valid UTF-8", ErrInvalid, id)
	case strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("%w: id %q contains a control character", ErrInvalid, id)
	case strings.ContainsAny(id, "{}"):
		return fmt.Errorf("%w: id %q: braces are not allowed", ErrInvalid, id)
	}
	return nil
}

// validSubject accepts only a literal NATS subject: requesters publish on it,
// and a publish subject cannot hold wildcards.
func validSubject(s string) error {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || strings.ContainsAny(tok, "*>") || strings.ContainsFunc(tok, unicode.IsSpace) || strings.ContainsFunc(tok, unicode.IsControl) {
			return fmt.Errorf("%w: NATS subject %q: want dot-separated literal tokens", ErrInvalid, s)
		}
	}
	return nil
}
