package job

import (
	"encoding/json"
	"errors"
	"time"
)

// ErrNoQueue: no queue of that name has received a job or been paused.
var ErrNoQueue = errors.New("job: no such queue")

// FinishedMinutes is how many minutes Finished reports: the last hour,
// the current minute last.
const FinishedMinutes = 60

// Minute counts the jobs of a queue that ended in one minute, by the state
// they ended in.
type Minute struct {
	At        time.Time // the minute's start, UTC
	Succeeded int64
	Failed    int64
	Cancelled int64
	Expired   int64
}

// MarshalJSON writes the API's minute object.
func (m Minute) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		At        stamp `json:"at"`
		Succeeded int64 `json:"succeeded"`
		Failed    int64 `json:"failed"`
		Cancelled int64 `json:"cancelled"`
		Expired   int64 `json:"expired"`
	}{stamp(m.At), m.Succeeded, m.Failed, m.Cancelled, m.Expired})
}
