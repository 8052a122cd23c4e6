package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/leasehold/leasehold/job"
)

// GET /v1/jobs/{id}/events
//
// The first read of the stream happens before the response starts, so an
// unknown job or a bad Last-Event-ID gets a proper status. After that a
// failure can only end the stream; the client resumes with Last-Event-ID.
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request, c caller) {
	if err := s.streams.take(c.tenant); err != nil {
		s.fail(w, r, err)
		return
	}
	defer s.streams.give(c.tenant)
	id, after := r.PathValue("id"), r.Header.Get("Last-Event-ID")
	events, err := s.events(r.Context(), c, id, after, 0)
	if errors.Is(err, job.ErrBadCursor) {
		err = fieldError("Last-Event-ID", "is not an event id this API sent")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // tell proxies not to hold events back
	w.WriteHeader(http.StatusOK)
	st := &stream{s: s, w: w, rc: http.NewResponseController(w), c: c, id: id}
	if err := st.run(r.Context(), events, after); err != nil && r.Context().Err() == nil {
		s.log.WarnContext(r.Context(), "event stream ended early", attrJobID, id, attrErr, err)
	}
}

// stream is one client's event stream of one job.
type stream struct {
	s  *server
	w  http.ResponseWriter
	rc *http.ResponseController
	c  caller
	id string
}

// run sends events, the first batch already read, then follows the job
// until its terminal state event has been sent.
func (st *stream) run(ctx context.Context, events []job.Event, after string) error {
	if err := st.rc.Flush(); err != nil {
		return err
	}
	var block time.Duration // the first read after the replay does not wait
	for {
		switch {
		case len(events) > 0:
			// A full page may have more after it: only a page that is not
			// full can end the stream, and the next read does not wait.
			full := len(events) == job.EventsPage
			done, err := st.send(ctx, events, full)
			if done || err != nil {
				return err
			}
			after, block = events[len(events)-1].ID, st.s.keepAlive
			if full {
				block = 0
			}
		case block == 0:
			// Nothing new. If the job has ended, its terminal event (which
			// the step that ends a job appends) is either before the
			// client's Last-Event-ID or came in since the read: one more
			// read sends it if so, and the stream ends.
			j, err := st.s.get(ctx, st.c, st.id)
			if err != nil {
				return err
			}
			if j.State.Terminal() {
				if events, err = st.s.events(ctx, st.c, st.id, after, 0); err == nil && len(events) > 0 {
					// More than a page came in since: the loop goes on.
					continue
				}
				return err
			}
			block = st.s.keepAlive
		default:
			// A whole keep-alive interval went by without an event.
			if _, err := st.w.Write([]byte(": keep-alive\n\n")); err != nil {
				return err
			}
			if err := st.rc.Flush(); err != nil {
				return err
			}
			block = 0
		}
		var err error
		if events, err = st.s.events(ctx, st.c, st.id, after, block); err != nil {
			return err
		}
	}
}

// send writes events, each flushed at once, and reports whether the
// terminal state event was among them: the last state event, and terminal
// (an earlier terminal one was followed by a retry), in a batch that is
// not a full page (more events may follow a full one). A state event carries
// the job object as it was at its move (store.JobAt): the job is read once
// for the batch, for the fields that never change, so a replay sends the
// bytes the live stream sent.
func (st *stream) send(ctx context.Context, events []job.Event, full bool) (done bool, err error) {
	var current *job.Job
	last := lastState(events)
	for i, e := range events {
		data := []byte(e.Data)
		if state, ok := eventState(e); ok {
			if current == nil {
				j, err := st.s.get(ctx, st.c, st.id)
				if err != nil {
					return false, err
				}
				current = &j
			}
			j, err := store.JobAt(*current, e)
			if err != nil {
				return false, err
			}
			if data, err = json.Marshal(st.s.shown(st.c, j)); err != nil {
				return false, err
			}
			done = i == last && !full && state.State.Terminal()
		}
		if len(data) == 0 {
			data = []byte("null") // an event without a data line is never dispatched
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "id: %s\nevent: %s\n", e.ID, e.Type)
		for line := range bytes.Lines(data) {
			fmt.Fprintf(&b, "data: %s\n", bytes.TrimRight(line, "\r\n"))
		}
		b.WriteString("\n")
		if _, err := st.w.Write(b.Bytes()); err != nil {
			return false, err
		}
		if err := st.rc.Flush(); err != nil {
			return false, err
		}
		if done {
			return true, nil
		}
	}
	return false, nil
}
