package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	fencedWriteScript = scripts.Load("fenced_write.lua")
	fencedAdmitScript = scripts.Load("fenced_admit.lua")
)

// Fence is a fenced store in Redis, and a fencing.Guard shared by every
// replica of a service: one hash per resource holds the highest token
// seen, the last value written and the token it was written with. Write
// and Admit are each one Lua script, one round trip, so the check and the
// write are one atomic step, on a single Redis and on a Redis Cluster.
type Fence struct{ s *Store }

// Fence returns the store's fenced resources.
func (s *Store) Fence() *Fence { return &Fence{s} }

// Write stores value for resource if token is at least the highest token
// the resource has seen, and makes token the highest. An equal token is the
// same owner writing again and is accepted. A lower token gets a
// *fencing.StaleError (errors.Is(err, fencing.ErrStale)) and changes
// nothing.
func (f *Fence) Write(ctx context.Context, resource string, token fencing.Token, value []byte) error {
	if err := fencing.Check(resource, token); err != nil {
		return err
	}
	return f.fence(ctx, "write", fencedWriteScript, resource, token, value)
}

// Admit makes token the highest token of resource if it is at least the
// highest seen, without storing a value: what a middleware in front of a
// downstream service needs. A lower token gets a *fencing.StaleError.
func (f *Fence) Admit(ctx context.Context, resource string, token fencing.Token) error {
	if err := fencing.Check(resource, token); err != nil {
		return err
	}
	return f.fence(ctx, "admit", fencedAdmitScript, resource, token)
}

// fence runs a fenced_*.lua script, whose reply is {1, token} when accepted
// and {0, highest} when the token is stale.
func (f *Fence) fence(ctx context.Context, op string, script *scripts.Script, resource string, token fencing.Token, args ...any) error {
	reply, err := script.Run(ctx, f.s.rdb, []string{f.s.keys.Fenced(resource)}, append([]any{token.String()}, args...)...).Slice()
	if err != nil {
		return fmt.Errorf("fencing: %s %q: %w", op, resource, err)
	}
	accepted, highest, err := decodeFence(reply)
	if err != nil {
		return fmt.Errorf("fencing: %s %q: %w", op, resource, err)
	}
	if accepted {
		return nil
	}
	return &fencing.StaleError{Resource: resource, Token: token, Highest: highest}
}

// decodeFence reads a fenced_*.lua reply, {1, token} or {0, highest}, with
// its length and types checked: a reply of another shape is an error, not
// a panic.
func decodeFence(reply []any) (accepted bool, highest fencing.Token, err error) {
	if len(reply) != 2 {
		return false, 0, fmt.Errorf("%d values in the reply, want 2", len(reply))
	}
	switch reply[0] {
	case int64(1):
		return true, 0, nil
	case int64(0):
		highest, err = parseToken(reply[1])
		if err != nil {
			return false, 0, fmt.Errorf("highest token: %w", err)
		}
		return false, highest, nil
	}
	return false, 0, fmt.Errorf("reply %v: want 1 or 0 first", reply[0])
}

// Read returns the last value written to resource and its token; a
// resource never written returns the zero Record and no error.
// Record.Token is the token of the value, which Admit may since have
// passed.
func (f *Fence) Read(ctx context.Context, resource string) (fencing.Record, error) {
	if err := fencing.CheckResource(resource); err != nil {
		return fencing.Record{}, err
	}
	vals, err := f.s.rdb.HMGet(ctx, f.s.keys.Fenced(resource), "token", "value").Result()
	if err != nil {
		return fencing.Record{}, fmt.Errorf("fencing: read %q: %w", resource, err)
	}
	if vals[0] == nil {
		return fencing.Record{}, nil
	}
	token, err := parseToken(vals[0])
	if err != nil {
		return fencing.Record{}, fmt.Errorf("fencing: read %q: %w", resource, err)
	}
	value, _ := vals[1].(string)
	return fencing.Record{Token: token, Value: []byte(value)}, nil
}

// parseToken reads a token the scripts stored as a decimal string.
func parseToken(v any) (fencing.Token, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("token %v is %T, want a decimal string", v, v)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return fencing.Token(n), err
}
