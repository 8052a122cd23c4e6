package execution

import "strings"

// waits is what a claim found waiting for a full key, for the next one:
// the lanes it left waiting, and the keys that refused a slot to a job of
// each tenant ("<tenant key> <key>"). A lane waits when it was left
// waiting, or when it names a key that refused another job of its tenant:
// a lane's jobs, and a tenant's lanes, share their keys (and the tenant its
// per-tenant shares), so one refusal answers for them all. The next claim
// reads one job of each lane that waits and asks for one lane of each
// tenant's that wait, not for every one: a waiting lane costs a claim its
// check, and however many lanes one tenant keeps waiting, the claim's
// asks go to the lanes that can run.
type waits struct {
	lanes  map[string]bool
	full   map[string]bool
	keysOf func(lane string) []string // queue.keysOf: a share key's refusal counts too
}

// has says whether lane waits. A nil *waits has none.
func (w *waits) has(lane string) bool {
	if w == nil {
		return false
	}
	return w.lanes[lane] || len(w.full) > 0 && waitsToo(w.full, w.keysOf(lane))
}

// any says whether anything waits.
func (w *waits) any() bool { return w != nil && (len(w.lanes) > 0 || len(w.full) > 0) }

// perLaneOf is perLane for the lanes of heads that do not wait: a lane
// that waits is read one job deep.
func perLaneOf(want int, heads []string, w *waits) int {
	n := 0
	for _, lane := range heads {
		if !w.has(lane) {
			n++
		}
	}
	return perLane(want, n)
}

// fullFor returns the keys that refused a slot to a job of each tenant
// among the candidates asked for: "<tenant key> <key>".
func (r *reservation) fullFor(asked []int, execIDs []string, ckeys [][]string) map[string]bool {
	full := map[string]bool{}
	for _, i := range asked {
		for _, k := range r.refused[execIDs[i]] {
			full[tenantKey(ckeys[i])+" "+k] = true
		}
	}
	return full
}

// waitsToo says whether a job that names keys waits for a full key: one
// of them refused a slot to another job of its tenant (full, see
// fullFor). The refusal answers for the tenant alone, whose jobs share its
// per-tenant shares; a smaller job of the tenant that a tpm budget would
// have let through waits a claim more.
func waitsToo(full map[string]bool, keys []string) bool {
	t := tenantKey(keys)
	for _, k := range keys {
		if full[t+" "+k] {
			return true
		}
	}
	return false
}

// tenantKey is the key tenant:<tenant> among a job's sorted concurrency
// keys, which always name it and no other tenant's (job.Submission).
func tenantKey(keys []string) string {
	for _, k := range keys {
		if strings.HasPrefix(k, "tenant:") {
			return k
		}
	}
	return ""
}
