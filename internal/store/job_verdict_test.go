package store

import "testing"

// A reply of the scripts that act on one job (cancel, signal, retry,
// delete) that does not have the shape its caller expects is an error,
// never a panic.
func TestDecodeVerdictRefusesMalformedReplies(t *testing.T) {
	record := []any{"id", "j1", "queue", "default", "state", "cancelled", "kind", "noop", "tenant", "acme"}
	r, err := decodeVerdict([]any{"cancelled", record})
	if err != nil || r.outcome != "cancelled" {
		t.Fatalf("a well-formed reply: %+v, %v", r, err)
	}
	if r, err := decodeVerdict([]any{"missing"}); err != nil || r.outcome != "missing" || r.value != nil {
		t.Fatalf("an outcome alone: %+v, %v", r, err)
	}
	if n, err := (verdict{outcome: "capped", value: int64(3)}).count(); err != nil || n != 3 {
		t.Fatalf("a count: %d, %v", n, err)
	}

	bad := map[string]any{
		"nil":              nil,
		"not a list":       "missing",
		"empty":            []any{},
		"three values":     []any{"cancelled", record, "more"},
		"outcome a number": []any{int64(1), record},
		"outcome a list":   []any{[]any{"cancelled"}},
	}
	for name, reply := range bad {
		if _, err := decodeVerdict(reply); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	if _, err := (verdict{outcome: "cancelled"}).job("default", "id-1"); err == nil {
		t.Error("a job read from a reply without a record")
	}
	if _, err := (verdict{outcome: "cancelled", value: record[:3]}).job("default", "id-1"); err == nil {
		t.Error("a job read from a record of an odd length")
	}
	if _, err := (verdict{outcome: "capped", value: "3"}).count(); err == nil {
		t.Error("a count read from a string")
	}
}
