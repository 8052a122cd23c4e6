package scripts

import (
	"encoding/json"
	"strconv"
	"strings"
)

// What Go readers of the queue's data share with the scripts that write
// it. The job hash's schema and the transition rule are in transition.lua;
// packages job and execution read the same keys through what is here, so
// neither reaches into the other.

// EventsMaxLen caps each job's event stream (XADD MAXLEN ~): every script
// that appends an event is given it.
const EventsMaxLen = 1000

// SubmittedStateData is the data of every job's first state event, its
// submit's move to queued, which the scripts keep as nothing, in the
// job's states field, stream or folded key (states.lua's submitted: the
// two must be the same bytes).
const SubmittedStateData = `{"state":"queued","attempt":0,"job":["","","0","","0","","","","","",""]}`

// EventFields name the values of a state event's job array: finished_at,
// then the fields a move changes that the API shows, in transition.lua's
// order (event_names: finished_at, then shown_names).
var EventFields = []string{"finished_at", "started_at", "cancel_requested", "error", "token", "exec_id",
	"exec_worker", "exec_attempt", "exec_started_at", "exec_heartbeat_at", "exec_finished_at"}

// Implied are the fields a job's hash leaves out when they hold their
// usual value, and that value, which every reader takes when one is
// absent (transition.lua's implied).
var Implied = map[string]string{"attempt": "0", "cancel_requested": "0", "started_at": "", "max_wait_ms": "0",
	"priority": "0", "on_busy": "queue"}

// LimitOf returns key's limit in limits, the limits hash read into key (or
// "prefix:*") → limit; -1 for none, and 0 is a limit: nothing runs. An
// exact entry wins over the wildcard of its prefix: "tenant:*" gives every
// tenant a limit of its own.
func LimitOf(limits map[string]int64, key string) int64 {
	if n, ok := Lookup(limits, key); ok {
		return n
	}
	return -1
}

// Lookup returns what m holds for key by the limits' lookup rule (see
// LimitOf): the exact entry, else the wildcard of key's prefix. The
// budgets hash is read by the same rule.
func Lookup[V any](m map[string]V, key string) (V, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	if i := strings.IndexByte(key, ':'); i >= 0 {
		if v, ok := m[key[:i+1]+"*"]; ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// Lane is the lane (fair.lua's fair_lane) of a job of kind whose
// concurrency keys, as the job stores them, are keys (a JSON array): the
// kind, then the keys.
func Lane(kind, keys string) string { return kind + keys }

// LaneKind is the kind of lane's jobs: its name up to its keys (fair.lua's
// fair_kind).
func LaneKind(lane string) string {
	kind, _, _ := strings.Cut(lane, "[")
	return kind
}

// LaneKeys is the concurrency keys of lane's jobs (nil for "", a job
// gone).
func LaneKeys(lane string) []string {
	var keys []string
	_ = json.Unmarshal([]byte(lane[len(LaneKind(lane)):]), &keys) // written by the submit script: always an array
	return keys
}

// OtherKeys is the label of the keys that neither a limit nor a budget
// applies to (Label).
const OtherKeys = "other"

// Label is key's value of a metric's key label: the entry of limits or
// budgets that applies to it by Lookup's rule (key itself, else its
// prefix's wildcard, as "model:*"), or OtherKeys. A tenant can make up
// any number of keys (under tenant:<t>:, any model:<x> of llm.chat):
// labelled by the configuration that applies to them, they add no more
// series than the configuration has entries.
func Label[L, B any](limits map[string]L, budgets map[string]B, key string) string {
	_, limited := limits[key]
	_, budgeted := budgets[key]
	if limited || budgeted {
		return key
	}
	if i := strings.IndexByte(key, ':'); i >= 0 {
		wildcard := key[:i+1] + "*"
		_, limited = limits[wildcard]
		_, budgeted = budgets[wildcard]
		if limited || budgeted {
			return wildcard
		}
	}
	return OtherKeys
}

// LaneCounts reads a queue's fair hash (fair.lua), where field "#<lane>"
// counts a lane's ready jobs, into lane → ready jobs.
func LaneCounts(fair map[string]string) map[string]int64 {
	out := map[string]int64{}
	for field, v := range fair {
		if lane, ok := strings.CutPrefix(field, "#"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[lane] = n
			}
		}
	}
	return out
}
