package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/leasehold/leasehold/job"
)

// signalBody is the body of POST /v1/jobs/{id}/signal.
type signalBody struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data"`
}

// POST /v1/jobs/{id}/signal: a signal spends a unit of the tenant's
// submission rate, as a retry does: each may start an execution. The
// admin's are not counted.
func (s *server) signalJob(w http.ResponseWriter, r *http.Request, c caller) {
	body, err := readJSONBody(w, r, s.maxBody)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var sig signalBody
	given, err := decodeInto(body, &sig)
	if err == nil && !given["name"] {
		err = fieldError("name", "is required")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if !c.admin {
		if err := s.limit(ctx, w, c.tenant, ""); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	j, resumed, err := s.store.Signal(ctx, c.tenant, r.PathValue("id"), c.admin, sig.Name, sig.Data)
	switch {
	case errors.Is(err, job.ErrConflict):
		writeConflict(w, s.shown(c, j), "the job already ended "+string(j.State)+"; it takes no signal")
		return
	case errors.Is(err, job.ErrSignalsFull):
		writeConflict(w, s.shown(c, j), fmt.Sprintf("the job keeps as many signals for later waits as it may (%d, or %d bytes of data)",
			job.MaxKeptSignals, job.MaxKeptSignalBytes))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	if resumed {
		s.wake(r, j.Queue)
	}
	writeJSON(w, http.StatusAccepted, s.shown(c, j))
}
