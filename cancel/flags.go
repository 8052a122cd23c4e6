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

	"github.com/leasehold/leasehold/internal/store"
)

// ErrRequested is the cause a watched context carries once cancellation of
// its id was requested: context.Cause(ctx) == ErrRequested.
var ErrRequested = errors.New("cancel: requested")

// ErrInvalid is wrapped by every error about bad input (id, ttl, config), so
// callers can tell a request to fix from a backend to retry.
var ErrInvalid = errors.New("cancel: invalid argument")

// MaxIDLen is the longest id, in bytes, that Request and Check accept.
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
	store   *store.Store
	nc      *nats.Conn
	subject string
	log     *slog.Logger
}

// New returns Flags that write to st and publish on nc. Requesters and
// watchers must share st's prefix. nc may be nil: then nothing is published
// and watchers learn of requests by polling alone.
func New(st *store.Store, nc *nats.Conn, cfg Config) (*Flags, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
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
	return &Flags{store: st, nc: nc, subject: subject, log: log}, nil
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
	if err := f.store.RequestCancel(ctx, id, ttl); err != nil {
		return fmt.Errorf("cancel: %w", err)
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
	set, err := f.store.CancelFlagged(ctx, id)
	if err != nil {
		return false, fmt.Errorf("cancel: %w", err)
	}
	return set[0], nil
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
