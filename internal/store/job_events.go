package store

import (
	"github.com/leasehold/leasehold/job"

	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

// Events returns the events of job id after the event id after ("" = from
// the start), at most EventsPage of them. With block > 0 and nothing there
// yet, it waits up to block for the next events, holding one Redis
// connection meanwhile. A malformed after is ErrBadCursor.
//
// A job's events are in its hash's field states until something needs
// its stream (internal/store/scripts/states.lua), then in its stream, and in
// its folded key once a reaper folded them there a while after the job
// ended (in its hash's field events when an older version folded them;
// see internal/store/scripts/transition.lua); a retry puts them back in the
// stream. While a worker of an older version, which appends every event
// to the stream, runs beside this one, a job may have events in both its
// hash and its stream: they are merged by id. A reader that waits gives
// the job its stream first (job_follow.lua), since XREAD BLOCK waits on a
// stream alone, and reads the job again after a wait that found nothing,
// in case a fold came meanwhile.
func (s *Store) Events(ctx context.Context, tenant, id string, admin bool, after string, block time.Duration) ([]job.Event, error) {
	from, err := job.ParseStreamID(cmp.Or(after, "0"))
	if err != nil {
		return nil, job.ErrBadCursor
	}
	queue, err := s.locate(ctx, id)
	if err != nil {
		return nil, err
	}
	k, err := s.readEvents(ctx, queue, id, after, from)
	if err != nil {
		return nil, err
	}
	if k.owner == "" || (!admin && k.owner != tenant) {
		return nil, job.ErrNotFound
	}
	events, err := k.after(from)
	if err != nil || len(events) > 0 || block <= 0 {
		return events, err
	}
	if k.inHash {
		if err := s.run(ctx, jobFollowScript, followCall{queue: queue, id: id}).Err(); err != nil {
			return nil, fmt.Errorf("job: events %s: %w", id, err)
		}
	}
	// A folded job gets more events only from a retry, which puts them
	// back in its stream: the wait is on the stream in every case.
	streams, err := s.rdb.XRead(ctx, eventsRead(s.keys.JobEvents(queue, id), after, block)).Result()
	if events, err = streamEvents(streams, err); err != nil || len(events) > 0 {
		return events, err
	}
	if k, err = s.readEvents(ctx, queue, id, after, from); err != nil {
		return nil, err
	}
	return k.after(from)
}

// jobEvents is what one read of a job's events found: its tenant (""
// when there is no such job), its events outside its stream (three
// strings each: id, type and data, in order of id) and those of its
// stream after the cursor (and any others found after it).
type jobEvents struct {
	owner  string
	kept   []string
	inHash bool // kept is its hash's field states
	stream []job.Event
}

// readEvents reads the events of job id of queue after after (from), as
// jobEvents, in one step (a transaction: the job's keys share its queue's
// slot): the job's tenant, states and fold with readJob, then its stream.
func (s *Store) readEvents(ctx context.Context, queue, id, after string, from job.StreamID) (jobEvents, error) {
	var r jobRead
	var xread *redis.XStreamSliceCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r = s.readJob(ctx, p, queue, id, append([]string{"tenant", "events", "states"}, scripts.EventFields...))
		xread = p.XRead(ctx, eventsRead(s.keys.JobEvents(queue, id), after, 0))
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return jobEvents{}, fmt.Errorf("job: events %s: %w", id, err)
	}
	vals, f, folded, _, err := r.values()
	if err != nil {
		return jobEvents{}, fmt.Errorf("job: events %s: %w", id, err)
	}
	var k jobEvents
	k.owner, _ = vals[0].(string)
	if k.stream, err = streamEvents(xread.Result()); err != nil {
		return jobEvents{}, fmt.Errorf("job: events %s: %w", id, err)
	}
	switch old, states := vals[1], vals[2]; {
	case folded:
		if k.kept, err = f.events(vals[3:]); err != nil {
			return jobEvents{}, fmt.Errorf("job: events %s: %w", id, err)
		}
		if s, ok := f.Fields["states"]; ok {
			// Folded by an older worker, which knew nothing of the field
			// and moved it as a long one (docs/operations.md, Upgrading):
			// its events are read beside the stream's.
			more, err := unfold(parseStates(s), from)
			if err != nil {
				return jobEvents{}, fmt.Errorf("job: events %s: %w", id, err)
			}
			k.stream = append(k.stream, more...)
		}
	case old != nil:
		s, _ := old.(string)
		if err := json.Unmarshal([]byte(s), &k.kept); err != nil {
			return jobEvents{}, fmt.Errorf("job: events %s: folded events: %w", id, err)
		}
	case states != nil:
		s, _ := states.(string)
		k.kept, k.inHash = parseStates(s), true
	}
	return k, nil
}

// after returns the events of k after from, at most EventsPage, in order
// of id: those kept outside the stream and those of the stream, each once.
func (k jobEvents) after(from job.StreamID) ([]job.Event, error) {
	events, err := unfold(k.kept, from)
	if err != nil || len(k.stream) == 0 {
		return events, err
	}
	if len(events) == 0 {
		return k.stream, nil
	}
	// Read in one step (readEvents), an event is in one place alone.
	events = append(events, k.stream...)
	slices.SortStableFunc(events, func(a, b job.Event) int { return compareIDs(a.ID, b.ID) })
	return events[:min(len(events), job.EventsPage)], nil
}

// eventsRead is the XREAD of the events after after of stream key,
// waiting up to block for them when block > 0.
func eventsRead(key, after string, block time.Duration) *redis.XReadArgs {
	// go-redis sends BLOCK 0 (wait forever) for Block 0; -1 means no BLOCK.
	args := &redis.XReadArgs{Streams: []string{key, cmp.Or(after, "0")}, Count: job.EventsPage, Block: -1}
	if block > 0 {
		args.Block = max(block, time.Millisecond)
	}
	return args
}

// newEvent is the event of id, typ and data as the scripts store it. A
// state event with no data is a job's first, its submit's, which the
// scripts keep without its data wherever it is: the job's states field,
// its stream, its folded key (internal/store/scripts/states.lua).
func newEvent(id, typ, data string) job.Event {
	if typ == "state" && data == "" {
		data = scripts.SubmittedStateData
	}
	return job.Event{ID: id, Type: typ, Data: json.RawMessage(data)}
}

// streamEvents returns the events of an eventsRead's reply.
func streamEvents(streams []redis.XStream, err error) ([]job.Event, error) {
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var events []job.Event
	for _, m := range streams[0].Messages {
		typ, _ := m.Values["type"].(string)
		data, _ := m.Values["data"].(string)
		events = append(events, newEvent(m.ID, typ, data))
	}
	return events, nil
}

// parseStates returns the events of a job's states field, three strings
// each as unfold reads them, in order: the field holds a record per
// event, newest first, each "<id> <data>\n" (internal/store/scripts/states.lua),
// the data of the submit's event left out. A malformed record is kept as
// it is, for unfold to refuse.
func parseStates(states string) []string {
	records := strings.Split(strings.TrimSuffix(states, "\n"), "\n")
	flat := make([]string, 0, 3*len(records))
	for _, r := range slices.Backward(records) {
		id, data, _ := strings.Cut(r, " ")
		flat = append(flat, id, "state", data)
	}
	return flat
}

// unfold returns the events after from, at most EventsPage, of a job's
// events kept outside its stream: three strings each, its stream id, type
// and data.
func unfold(flat []string, from job.StreamID) ([]job.Event, error) {
	if len(flat)%3 != 0 {
		return nil, fmt.Errorf("job: kept events: malformed (%d strings)", len(flat))
	}
	var events []job.Event
	for i := 0; i < len(flat) && len(events) < job.EventsPage; i += 3 {
		at, err := job.ParseStreamID(flat[i])
		if err != nil {
			return nil, fmt.Errorf("job: kept events: %w", err)
		}
		if at.After(from) {
			events = append(events, newEvent(flat[i], flat[i+1], flat[i+2]))
		}
	}
	return events, nil
}

// compareIDs orders two stream ids that parse (Redis's, or kept ones that
// unfold checked).
func compareIDs(a, b string) int {
	x, _ := job.ParseStreamID(a)
	y, _ := job.ParseStreamID(b)
	if c := cmp.Compare(x.Ms, y.Ms); c != 0 {
		return c
	}
	return cmp.Compare(x.Seq, y.Seq)
}
