package execution

import "testing"

// A claim reply that does not have the shape the caller expects is an
// error, never a panic or a job run with half its fields.
func TestDecodeClaimRefusesMalformedReplies(t *testing.T) {
	job := []any{"j1", "e1", int64(7), int64(1), "echo", "{}", "60000", "acme", "", "", `{"step":3}`,
		`{"name":"approval","data":{"ok":true},"timed_out":false}`}
	good := append([]any{[]any{}, []any{}, []any{"[\"model:m\"]", "300"}}, job...)
	res, err := decodeClaim(good)
	if err != nil {
		t.Fatalf("a well-formed reply: %v", err)
	}
	if len(res.jobs) != 1 || res.jobs[0].token != 7 || res.jobs[0].timeout.Milliseconds() != 60000 ||
		string(res.jobs[0].resume.Checkpoint) != `{"step":3}` ||
		res.jobs[0].resume.Signal.Name != "approval" || res.costs[`["model:m"]`] != 300 {
		t.Fatalf("decoded %+v", res)
	}

	bad := map[string][]any{
		"empty":              {},
		"a job cut short":    append([]any{[]any{}, []any{}, []any{}}, job[:11]...),
		"costs not pairs":    append([]any{[]any{}, []any{}, []any{"lane"}}, job...),
		"no costs":           append([]any{[]any{}, []any{}}, job...),
		"blocked not a list": append([]any{"lane", []any{}, []any{}}, job...),
		"token not a number": append([]any{[]any{}, []any{}, []any{}},
			"j1", "e1", "7", int64(1), "echo", "{}", "60000", "acme", "", "", "", ""),
		"bad timeout": append([]any{[]any{}, []any{}, []any{}},
			"j1", "e1", int64(7), int64(1), "echo", "{}", "10m", "acme", "", "", "", ""),
		"bad signal": append([]any{[]any{}, []any{}, []any{}},
			"j1", "e1", int64(7), int64(1), "echo", "{}", "60000", "acme", "", "", "", "{"),
	}
	for name, reply := range bad {
		if _, err := decodeClaim(reply); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}
