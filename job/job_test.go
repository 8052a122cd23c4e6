package job_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leasehold/leasehold/job"
)

func TestStateTerminal(t *testing.T) {
	t.Parallel()
	for s, want := range map[job.State]bool{
		job.StateQueued: false, job.StateRunning: false, job.StateRetrying: false,
		job.StateSucceeded: true, job.StateFailed: true, job.StateCancelled: true, job.StateExpired: true,
	} {
		if s.Terminal() != want {
			t.Errorf("%s.Terminal() = %v", s, !want)
		}
	}
}

// The record as the execution package leaves it after a failed attempt that
// is being retried, read back as the API's job object.
func TestParseRecordAndJSON(t *testing.T) {
	t.Parallel()
	h := map[string]string{
		"id": "0190b6a0-0000-7000-8000-000000000001", "tenant": "acme", "queue": "default",
		"kind": "llm.chat", "state": "retrying", "attempt": "1", "max_attempts": "3", "priority": "-2",
		"concurrency_keys": `["model:gpt-4o","tenant:acme"]`, "created_at": "1795953600000",
		"started_at": "1795953600250", "finished_at": "", "cancel_requested": "1",
		"input": `{"model":"gpt-4o"}`, "metadata": `{"conversation":"c-1"}`, "result": "",
		"error":      `{"code":"handler_error","message":"upstream said 500"}`,
		"timeout_ms": "600000", "max_wait_ms": "0", "on_busy": "queue", "token": "42",
		"exec_id": "0190b6a0-0000-7000-8000-0000000000e1", "exec_worker": "w-1", "exec_attempt": "1",
		"exec_started_at": "1795953600250", "exec_heartbeat_at": "1795953601005",
		"exec_finished_at": "1795953601500", "exec_state": "failed",
	}
	j, err := job.ParseRecord(h)
	if err != nil {
		t.Fatal(err)
	}
	if j.Timeout != 10*time.Minute || j.MaxWait != 0 || j.OnBusy != job.OnBusyQueue || string(j.Input) != `{"model":"gpt-4o"}` {
		t.Errorf("options: %v %v %s %s", j.Timeout, j.MaxWait, j.OnBusy, j.Input)
	}
	got, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	// The times come last: MarshalJSON overrides them to write milliseconds.
	want := `{"id":"0190b6a0-0000-7000-8000-000000000001","tenant":"acme","queue":"default",` +
		`"kind":"llm.chat","state":"retrying","attempt":1,"max_attempts":3,"priority":-2,` +
		`"concurrency_keys":["model:gpt-4o","tenant:acme"],"cancel_requested":true,` +
		`"execution":{"id":"0190b6a0-0000-7000-8000-0000000000e1","worker":"w-1","fencing_token":42,` +
		`"attempt":1,"started_at":"2026-11-29T12:00:00.250Z","heartbeat_at":"2026-11-29T12:00:01.005Z",` +
		`"finished_at":"2026-11-29T12:00:01.500Z"},"result":null,` +
		`"error":{"code":"handler_error","message":"upstream said 500"},"metadata":{"conversation":"c-1"},` +
		`"created_at":"2026-11-29T12:00:00.000Z","started_at":"2026-11-29T12:00:00.250Z","finished_at":null}`
	if string(got) != want {
		t.Errorf("JSON\n got %s\nwant %s", got, want)
	}
	// A client decodes the object back into the same job.
	var back job.Job
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if string(again) != want {
		t.Errorf("decoded and encoded again\n got %s\nwant %s", again, want)
	}

	for _, field := range []string{"attempt", "created_at", "concurrency_keys", "error", "exec_started_at"} {
		bad := map[string]string{}
		for k, v := range h {
			bad[k] = v
		}
		bad[field] = "garbage"
		if _, err := job.ParseRecord(bad); err == nil {
			t.Errorf("a corrupt %s parsed", field)
		}
	}
	if _, err := job.ParseRecord(map[string]string{}); err == nil {
		t.Error("an empty record parsed")
	}
}
