package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrInvalid is returned for input no fenced call can accept: token 0 (tokens
// are issued from 1), an empty resource name, or a Fencing-Token header that
// is not a token. Nothing is read or written.
var ErrInvalid = errors.New("fencing: invalid input")

// CheckResource refuses an empty resource name.
func CheckResource(resource string) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalid)
	}
	return nil
}

// Record is what a fenced resource holds: the last value written and the
// token it was written with. The zero Record (Token 0) means no value has
// been written.
type Record struct {
	Token Token
	Value []byte
}

// StaleError is the error a refused call returns. It matches ErrStale with
// errors.Is and tells the caller how far behind it is.
type StaleError struct {
	Resource string
	Token    Token // the token the refused call carried
	Highest  Token // the highest token the resource has seen
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for %q: highest seen is %d", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale, so errors.Is(err, ErrStale) holds.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Guard admits a token for a resource when it is at least the highest token
// the resource has seen, and remembers it as the new highest. It refuses a
// lower token with a *StaleError, and invalid input with ErrInvalid. Any other
// error means the guard could not decide (its store is unreachable): the
// caller must not treat the token as admitted.
//
// The store's Fence keeps the highest tokens in Redis, shared by every
// replica of a service; *Memory keeps them in the process, for a service
// of one replica.
type Guard interface {
	Admit(ctx context.Context, resource string, token Token) error
}

// Memory is a Guard that keeps the highest token of each resource in process
// memory. It suits a downstream service that runs as one process and does not
// share Redis; it forgets everything when the process exits. Every resource it
// has seen keeps an entry, as a forgotten resource would admit stale tokens
// again. The zero value is ready to use; a Memory must not be copied.
type Memory struct {
	mu      sync.Mutex
	highest map[string]Token
}

// Admit implements Guard.
func (m *Memory) Admit(_ context.Context, resource string, token Token) error {
	if err := Check(resource, token); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if highest := m.highest[resource]; token < highest {
		return &StaleError{Resource: resource, Token: token, Highest: highest}
	}
	if m.highest == nil {
		m.highest = make(map[string]Token)
	}
	m.highest[resource] = token
	return nil
}

// Check refuses what no guard can fence: tokens start at 1, so 0 can only be
// an unset token, and an empty resource name is a caller's bug that would put
// unrelated writers under one fence (CheckResource).
func Check(resource string, token Token) error {
	if err := CheckResource(resource); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token 0 (tokens are issued from 1)", ErrInvalid)
	}
	return nil
}
