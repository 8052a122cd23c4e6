package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/job"
)

// The record as the execution package leaves it after a failed attempt that
// is being retried, read back as the API's job object.
func TestParseRecordAndJSON(t *testing.T) {
	t.Parallel()
	h := map[string]string{
		"tenant": "acme", "kind": "llm.chat", "state": "retrying", "attempt": "1", "max_attempts": "3", "priority": "-2",
		"concurrency_keys": `["model:gpt-4o","tenant:acme"]`, "created_at": "1795953600000",
		"started_at": "1795953600250", "finished_at": "", "cancel_requested": "1",
		"input": `{"model":"gpt-4o"}`, "metadata": `{"conversation":"c-1"}`, "result": "",
		"error":      `{"code":"handler_error","message":"upstream said 500"}`,
		"timeout_ms": "600000", "max_wait_ms": "0", "on_busy": "queue", "token": "42",
		"exec_id": "0190b6a0-0000-7000-8000-0000000000e1", "exec_worker": "w-1", "exec_attempt": "1",
		"exec_started_at": "1795953600250", "exec_heartbeat_at": "1795953601005",
		"exec_finished_at": "1795953601500", "exec_state": "failed",
	}
	j, err := store.ParseRecord("default", "0190b6a0-0000-7000-8000-000000000001", h)
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
		`"input":{"model":"gpt-4o"},"schedule":null,"cost":null,"webhook":null,` +
		`"checkpoint":null,"waiting_for":null,` +
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
		if _, err := store.ParseRecord("default", "0190b6a0-0000-7000-8000-000000000001", bad); err == nil {
			t.Errorf("a corrupt %s parsed", field)
		}
	}
	if _, err := store.ParseRecord("default", "0190b6a0-0000-7000-8000-000000000001", map[string]string{}); err == nil {
		t.Error("an empty record parsed")
	}
}

// A state event shows the job as it was at its move: the fields moves
// change come from the event, the others from the job as it is now, and
// result only at succeeded. An event written before state events carried
// those fields shows the job now, in the event's state and attempt.
func TestJobAtStateEvent(t *testing.T) {
	t.Parallel()
	now := job.Job{
		ID: "0190b6a0-0000-7000-8000-000000000001", Tenant: "acme", Queue: "default", Kind: "llm.chat",
		State: job.StateSucceeded, Attempt: 2, MaxAttempts: 3, Result: json.RawMessage(`{"ok":true}`),
		Execution: &job.Execution{ID: "0190b6a0-0000-7000-8000-0000000000e2", Attempt: 2},
		Error:     &job.Error{Code: job.CodeHandlerError, Message: "old"},
	}
	at := func(data string) job.Job {
		t.Helper()
		j, err := store.JobAt(now, job.Event{ID: "1-0", Type: "state", Data: json.RawMessage(data)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if j := at(`{"state":"queued","attempt":0,"job":["","","0","","0","","","","","",""]}`); j.State != job.StateQueued ||
		j.Attempt != 0 || j.Execution != nil || j.Error != nil || j.Result != nil || j.StartedAt != nil ||
		j.ID != now.ID || j.MaxAttempts != 3 {
		t.Errorf("queued: %+v", j)
	}
	j := at(`{"state":"retrying","attempt":1,"job":["","1795953600250","0","{\"code\":\"timeout\",\"message\":\"slow\"}",` +
		`"7","e1","w-1","1","1795953600250","1795953601005","1795953601500"]}`)
	if j.State != job.StateRetrying || j.Result != nil || j.Error.Code != job.CodeTimeout || j.FinishedAt != nil ||
		j.Execution.ID != "e1" || j.Execution.FencingToken != 7 || j.Execution.FinishedAt == nil {
		t.Errorf("retrying: %+v %+v", j, j.Execution)
	}
	if j := at(`{"state":"succeeded","attempt":2,"job":["","","0","","8","e2","","2","1","1",""]}`); string(j.Result) != `{"ok":true}` || j.Error != nil {
		t.Errorf("succeeded: %+v", j)
	}
	if j := at(`{"state":"queued","attempt":0}`); j.State != job.StateQueued || j.Attempt != 0 ||
		j.Execution != now.Execution || string(j.Result) != `{"ok":true}` {
		t.Errorf("an event without fields: %+v", j)
	}
	for _, e := range []job.Event{
		{ID: "1-0", Type: "progress", Data: json.RawMessage(`{}`)},
		{ID: "1-0", Type: "state", Data: json.RawMessage(`[]`)},
		{ID: "1-0", Type: "state", Data: json.RawMessage(`{"state":"running","attempt":1,"job":["","","0","","1","e1","","x","1","1",""]}`)},
		{ID: "1-0", Type: "state", Data: json.RawMessage(`{"state":"running","attempt":1,"job":["","","0"]}`)},
	} {
		if _, err := store.JobAt(now, e); err == nil {
			t.Errorf("%s event %s was read", e.Type, e.Data)
		}
	}
}
