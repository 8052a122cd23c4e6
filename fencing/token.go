package fencing

import (
	"errors"
	"strconv"
)

// Token is a fencing token: issued from a strictly increasing counter at
// every acquisition, carried by every write the holder makes.
type Token uint64

// String returns the token in decimal, as it travels in the Fencing-Token header.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// ErrStale is returned when a write carries a token lower than the highest
// one the resource has seen: its holder has lost ownership.
var ErrStale = errors.New("fencing: stale token")
