// Package jobid makes job ids that say which queue holds their job.
//
// A job lives in its queue's Redis slot ({q:<queue>}), so a read by id
// must learn the queue first. Ids of version 7 (before this package) need
// a lookup key per job for that: a key, a command per submit and a round
// trip per read. An id of this package is a UUID of version 8 (RFC 9562's
// custom version) laid out as version 7, 48 bits of Unix milliseconds then
// random bits, with 16 of the random bits replaced by a tag of the queue's
// name: the queues whose names have the id's tag are where its job may be,
// nearly always one.
package jobid

import (
	"hash/fnv"
	"time"

	"github.com/google/uuid"
)

// New returns a new id of a job of queue.
func New(queue string) string {
	u := uuid.Must(uuid.NewV7())
	// NewV7 puts the time's sub-millisecond fraction in the 12 bits after
	// the version (bumped within a process, so its ids stay in order: a
	// batch's jobs list in their order) and 62 random bits after the
	// variant. The tag takes 16 of those: 46 remain, and two ids of one
	// millisecond and one fraction collide once in 2^46.
	tag := Tag(queue)
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[9], u[10] = byte(tag>>8), byte(tag)
	return u.String()
}

// Tag is queue's tag: 16 bits of an FNV-1a hash of its name.
func Tag(queue string) uint16 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(queue))
	s := h.Sum32()
	return uint16(s ^ s>>16)
}

// Parse reads id: its tag when it is a canonical id of this package
// (tagged), and when it was made. ok is false for a string that is no
// canonical UUID of version 7 or 8, which names no job.
func Parse(id string) (tag uint16, tagged bool, at time.Time, ok bool) {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id || (u.Version() != 7 && u.Version() != 8) {
		return 0, false, time.Time{}, false
	}
	ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
	return uint16(u[9])<<8 | uint16(u[10]), u.Version() == 8, time.UnixMilli(ms), true
}
