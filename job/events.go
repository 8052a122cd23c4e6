package job

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Event is one event of a job.
type Event struct {
	ID   string          `json:"id"`   // a stream entry id, to resume after
	Type string          `json:"type"` // state, progress, output or log
	Data json.RawMessage `json:"data"`
}

// EventsPage is the most events one Events call returns: a replay of a
// long stream is read a page at a time, never whole.
const EventsPage = 100

// StreamID is a stream entry id.
type StreamID struct{ Ms, Seq uint64 }

// ParseStreamID reads a stream entry id, "<ms>" or "<ms>-<seq>", each part
// a uint64, so Redis is never handed one it refuses. A missing seq is 0,
// as XREAD reads it.
func ParseStreamID(id string) (StreamID, error) {
	ms, seq, hasSeq := strings.Cut(id, "-")
	var at StreamID
	var err error
	if at.Ms, err = strconv.ParseUint(ms, 10, 64); err != nil {
		return at, fmt.Errorf("bad stream id %q", id)
	}
	if hasSeq {
		if at.Seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
			return at, fmt.Errorf("bad stream id %q", id)
		}
	}
	return at, nil
}

// After reports whether id comes after other in a stream.
func (id StreamID) After(other StreamID) bool {
	return id.Ms > other.Ms || (id.Ms == other.Ms && id.Seq > other.Seq)
}
