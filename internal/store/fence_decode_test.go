package store

import (
	"testing"

	"github.com/leasehold/leasehold/fencing"
)

// A fenced script's reply of any shape but {1, token} or {0, highest} is
// an error, never a panic.
func TestDecodeFenceChecksTheReply(t *testing.T) {
	for _, c := range []struct {
		name     string
		reply    []any
		accepted bool
		highest  fencing.Token
		ok       bool
	}{
		{"accepted", []any{int64(1), "7"}, true, 0, true},
		{"stale", []any{int64(0), "9"}, false, 9, true},
		{"empty", []any{}, false, 0, false},
		{"one value", []any{int64(0)}, false, 0, false},
		{"three values", []any{int64(1), "7", "x"}, false, 0, false},
		{"a string first", []any{"1", "7"}, false, 0, false},
		{"another number first", []any{int64(2), "7"}, false, 0, false},
		{"a highest not a string", []any{int64(0), int64(9)}, false, 0, false},
		{"a highest not a number", []any{int64(0), "nine"}, false, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			accepted, highest, err := decodeFence(c.reply)
			if (err == nil) != c.ok || accepted != c.accepted || highest != c.highest {
				t.Fatalf("decodeFence(%v) = %v, %v, %v; want %v, %v, ok %v", c.reply, accepted, highest, err, c.accepted, c.highest, c.ok)
			}
		})
	}
}
