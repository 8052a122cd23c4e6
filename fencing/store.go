package fencing

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/keys"
	"github.com/leasehold/leasehold/internal/store/scripts"
)

var (
	writeScript = scripts.Load("fenced_write.lua")
	admitScript = scripts.Load("fenced_admit.lua")
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Prefix starts every key the store uses.
	// Default: "leasehold:" (keys.DefaultPrefix).
	Prefix string
}

// Store is a fenced store in Redis: one hash per resource holds the highest
// token seen, the last value written and the token it was written with.
// Write and Admit are each one Lua script, one round trip, so the check and
// the write are one atomic step, on a single Redis and on a Redis Cluster.
type Store struct {
	rdb  redis.UniversalClient
	keys keys.Space
}

// NewStore returns a Store that keeps its data in rdb.
func NewStore(rdb redis.UniversalClient, cfg StoreConfig) *Store {
	return &Store{rdb: rdb, keys: keys.New(cfg.Prefix)}
}

// Record is what a resource holds: the last value written and the token it
// was written with. The zero Record (Token 0) means no value has been written.
type Record struct {
	Token Token
	Value []byte
}

// Write stores value for resource if token is at least the highest token the
// resource has seen, and makes token the highest. An equal token is the same
// owner writing again and is accepted. A lower token gets a *StaleError
// (errors.Is(err, ErrStale)) and changes nothing.
func (s *Store) Write(ctx context.Context, resource string, token Token, value []byte) error {
	if err := check(resource, token); err != nil {
		return err
	}
	return s.fence(ctx, "write", writeScript, resource, token, value)
}

// Admit makes token the highest token of resource if it is at least the
// highest seen, without storing a value: what a middleware in front of a
// downstream service needs. A lower token gets a *StaleError.
func (s *Store) Admit(ctx context.Context, resource string, token Token) error {
	if err := check(resource, token); err != nil {
		return err
	}
	return s.fence(ctx, "admit", admitScript, resource, token)
}

// fence runs a fenced_*.lua script, whose reply is {1, token} when accepted
// and {0, highest} when the token is stale.
func (s *Store) fence(ctx context.Context, op string, script *scripts.Script, resource string, token Token, args ...any) error {
	reply, err := script.Run(ctx, s.rdb, []string{s.keys.Fenced(resource)}, append([]any{token.String()}, args...)...).Slice()
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
	return &StaleError{Resource: resource, Token: token, Highest: highest}
}

// decodeFence reads a fenced_*.lua reply, {1, token} or {0, highest}, with
// its length and types checked: a reply of another shape is an error, not
// a panic.
func decodeFence(reply []any) (accepted bool, highest Token, err error) {
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

// Read returns the last value written to resource and its token; a resource
// never written returns the zero Record and no error. Record.Token is the
// token of the value, which Admit may since have passed.
func (s *Store) Read(ctx context.Context, resource string) (Record, error) {
	if resource == "" {
		return Record{}, errEmptyResource
	}
	vals, err := s.rdb.HMGet(ctx, s.keys.Fenced(resource), "token", "value").Result()
	if err != nil {
		return Record{}, fmt.Errorf("fencing: read %q: %w", resource, err)
	}
	if vals[0] == nil {
		return Record{}, nil
	}
	token, err := parseToken(vals[0])
	if err != nil {
		return Record{}, fmt.Errorf("fencing: read %q: %w", resource, err)
	}
	value, _ := vals[1].(string)
	return Record{Token: token, Value: []byte(value)}, nil
}

// parseToken reads a token the scripts stored as a decimal string.
func parseToken(v any) (Token, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("token %v is %T, want a decimal string", v, v)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return Token(n), err
}
