package jobid_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/internal/jobid"
)

func TestAnIDCarriesItsQueuesTagAndTime(t *testing.T) {
	for _, queue := range []string{"default", "gpu", "a", "a-very-long-queue-name.with.dots_and_more"} {
		before := time.Now().Truncate(time.Millisecond)
		id := jobid.New(queue)
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 8 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("New(%q) = %q: not a UUID of version 8 (%v)", queue, id, err)
		}
		tag, tagged, at, ok := jobid.Parse(id)
		if !ok || !tagged || tag != jobid.Tag(queue) {
			t.Errorf("Parse(%q) = %d, %v, ok %v; want the tag %d", id, tag, tagged, ok, jobid.Tag(queue))
		}
		if at.Before(before) || at.After(time.Now()) {
			t.Errorf("Parse(%q) time %v, made after %v", id, at, before)
		}
	}
}

func TestIDsOfOneProcessKeepTheirOrder(t *testing.T) {
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = jobid.New("default")
	}
	if !slices.IsSorted(ids) {
		t.Error("ids made one after the other are out of order")
	}
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Error("an id was made twice")
	}
}

func TestAnUntaggedIDIsKnownAndOthersAreNot(t *testing.T) {
	v7 := uuid.Must(uuid.NewV7()).String()
	if _, tagged, at, ok := jobid.Parse(v7); !ok || tagged || time.Since(at) > time.Minute {
		t.Errorf("Parse(v7 %q) = tagged %v, %v, ok %v", v7, tagged, at, ok)
	}
	id := jobid.New("default")
	for _, bad := range []string{"", "x", uuid.NewString(), "{" + id + "}", "urn:uuid:" + id, id[:35],
		id + "0", "00000000000000000000000000000000", string([]byte{0xff})} {
		if _, _, _, ok := jobid.Parse(bad); ok {
			t.Errorf("Parse(%q) ok", bad)
		}
	}
}

func TestTagsSpreadQueueNames(t *testing.T) {
	tags := map[uint16]bool{}
	for i := range 1000 {
		tags[jobid.Tag("queue-"+string(rune('a'+i%26))+string(rune('a'+i/26)))] = true
	}
	// 1000 names in 65 536 tags: about 8 pairs share one.
	if len(tags) < 980 {
		t.Errorf("1000 names have %d tags", len(tags))
	}
}
