package httpapi

import (
	"bytes"
	"crypto/sha256"
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
	if c.admin {
		return j
	}
	return j.WithOpaqueWorker(s.keys.names)
}

// namesKey is the key of the opaque worker names: a digest of the
// configured API keys' digests, which every replica shares and no tenant
// knows, so a tenant cannot test guesses of host names against a name.
func namesKey(entries []keyEntry) []byte {
	sums := make([][]byte, len(entries))
	for i, e := range entries {
		sums[i] = e.sum[:]
	}
	slices.SortFunc(sums, bytes.Compare) // the order of LEASEHOLD_API_KEYS does not matter
	key := sha256.Sum256(bytes.Join(sums, nil))
	return key[:]
}
