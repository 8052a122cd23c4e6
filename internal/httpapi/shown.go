package httpapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/leasehold/leasehold/job"
)

// shown is j as c may see it. The admin sees the worker that runs an
// execution as the worker names itself (host name and pid); a tenant sees
// a stable opaque name instead, the same for one worker across its jobs
// and API replicas, and told apart from other workers' names, but saying
// nothing of the hosts behind it. Every job object the API renders goes
// through here: answers, listings and event streams (the console reads
// those).
func (s *server) shown(c caller, j job.Job) job.Job {
	if c.admin || j.Execution == nil || j.Execution.Worker == "" {
		return j
	}
	e := *j.Execution
	e.Worker = s.keys.workerName(c.tenant, e.Worker)
	j.Execution = &e
	return j
}

// workerName is the opaque name tenant sees for worker: a keyed hash, keyed
// by the configured API keys' digests, which every replica shares and no
// tenant knows, so a tenant cannot test guesses of host names against it.
// It includes the tenant, so two tenants cannot match their workers up.
func (k Keys) workerName(tenant, worker string) string {
	sums := make([][]byte, len(k.entries))
	for i, e := range k.entries {
		sums[i] = e.sum[:]
	}
	slices.SortFunc(sums, bytes.Compare) // the order of LEASEHOLD_API_KEYS does not matter
	key := sha256.Sum256(bytes.Join(sums, nil))
	mac := hmac.New(sha256.New, key[:])
	mac.Write([]byte(tenant))
	mac.Write([]byte{0})
	mac.Write([]byte(worker))
	return "worker-" + hex.EncodeToString(mac.Sum(nil)[:6])
}
