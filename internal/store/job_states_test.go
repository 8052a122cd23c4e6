package store_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// A job's state events are kept in its hash until they pass states_max
// (internal/store/scripts/states.lua), then move to its stream: at every step
// the events read are every move so far, once each, in order of strictly
// rising ids, and a retry's id (the field retries) is its event's.
func TestStateEventsOutgrowTheirHash(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		j := fx.submit(t, "acme", job.Submission{Kind: "echo", MaxAttempts: 1})
		hash, stream := fx.keys.Job(j.Queue, j.ID), fx.keys.JobEvents(j.Queue, j.ID)
		want := []string{"queued"}
		moved := false
		for round := range 20 {
			if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
				t.Fatal(err)
			}
			if _, err := fx.store.Retry(ctx, "acme", j.ID, false); err != nil {
				t.Fatal(err)
			}
			want = append(want, "cancelled", "queued")
			evs := fx.events(t, j.ID)
			var states []string
			for k, e := range evs {
				var s struct{ State string }
				if err := json.Unmarshal(e.Data, &s); err != nil || e.Type != "state" {
					t.Fatalf("round %d: event %d %+v: %v", round, k, e, err)
				}
				states = append(states, s.State)
				if k > 0 && testenv.CompareStreamIDs(evs[k-1].ID, e.ID) >= 0 {
					t.Fatalf("round %d: event ids %s then %s", round, evs[k-1].ID, e.ID)
				}
			}
			if !slices.Equal(states, want) {
				t.Fatalf("round %d: events %v, want %v", round, states, want)
			}
			inHash := fx.rdb.HExists(ctx, hash, "states").Val()
			inStream := fx.rdb.Exists(ctx, stream).Val() == 1
			if inHash == inStream || (moved && inHash) {
				t.Fatalf("round %d: events in the hash %v, in the stream %v (moved before: %v)", round, inHash, inStream, moved)
			}
			moved = inStream
			// Each retry's entry in the field retries is its event's id.
			for r, entry := range strings.Split(fx.rdb.HGet(ctx, hash, "retries").Val(), ",") {
				if id, _, _ := strings.Cut(entry, ":"); id != evs[2+2*r].ID {
					t.Fatalf("round %d: retry %d recorded at %s, its event is %s", round, r, id, evs[2+2*r].ID)
				}
			}
		}
		if !moved {
			t.Fatal("41 state events never left the hash")
		}
	})
}

// A new job whose values are all short has a listpack hash: the record
// of its first event holds no data, which would be longer than
// hash-max-listpack-value and make the hash a hashtable (twice the
// memory, and a fifth of a submit's Redis time).
//
// Fails when the submit's event is recorded with its data.
func TestNewJobHashIsAListpack(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		j := fx.submit(t, "acme", job.Submission{Kind: "echo", Input: json.RawMessage(`{"n":1}`)})
		if enc := fx.rdb.ObjectEncoding(t.Context(), fx.keys.Job(job.DefaultQueue, j.ID)).Val(); enc != "listpack" {
			t.Fatalf("the new job's hash is a %s, want a listpack", enc)
		}
	})
}

// A reader waiting for the next event of a job whose events are in its
// hash is woken by the next move, which the job's new stream now holds.
func TestFollowerOfAHashJobWakes(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		first := fx.events(t, j.ID)
		done := make(chan []job.Event, 1)
		go func() {
			evs, err := fx.store.Events(ctx, "acme", j.ID, false, first[0].ID, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			done <- evs
		}()
		testenv.Eventually(t, 10*time.Second, func() bool { return fx.blockedClients(t) > 0 }, "reader never blocked")
		if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
			t.Fatal(err)
		}
		select {
		case evs := <-done:
			if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"state":"cancelled"`) {
				t.Errorf("woken with %+v, want the cancel", evs)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the reader was not woken by the cancel")
		}
		if all := fx.events(t, j.ID); len(all) != 2 || all[0].ID != first[0].ID || string(all[0].Data) != string(first[0].Data) {
			t.Errorf("after the follow: %+v, want the queued event (as before) and the cancel", all)
		}
		// The submit's event keeps no data in the stream either.
		if es := fx.rdb.XRange(ctx, fx.keys.JobEvents(job.DefaultQueue, j.ID), "-", "+").Val(); len(es) == 0 || es[0].Values["data"] != "" {
			t.Errorf("stream %+v: want the submit's event first, without its data", es)
		}
	})
}
