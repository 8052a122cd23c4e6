package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

// scheduleBody is the body of POST /v1/schedules, its job still raw: it is
// decoded as a POST /v1/jobs body is, so the same fields are refused.
type scheduleBody struct {
	Name     string           `json:"name"`
	Cron     string           `json:"cron"`
	Timezone string           `json:"timezone"`
	Job      json.RawMessage  `json:"job"`
	Overlap  schedule.Overlap `json:"overlap"`
}

// POST /v1/schedules
func (s *server) createSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop, spec, err := s.readSchedule(w, r, c.tenant, "")
	defer stop()
	if err == nil {
		err = s.spendOnNew(ctx, w, c.tenant, spec.Name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sch, created, err := s.schedules.Create(ctx, c.tenant, spec)
	switch {
	case errors.Is(err, schedule.ErrExists):
		writeProblem(w, http.StatusConflict, "a schedule of this name exists with another body; change it with PUT /v1/schedules/"+spec.Name+", or choose another name",
			job.FieldError{Field: "name", Message: "is taken"})
	case err != nil:
		s.fail(w, r, err)
	case !created:
		writeJSON(w, http.StatusOK, sch) // the same body again
	default:
		w.Header().Set("Location", "/v1/schedules/"+sch.Name)
		writeJSON(w, http.StatusCreated, sch)
	}
}

// PUT /v1/schedules/{name}: replace an existing schedule's cron, timezone,
// job and overlap, keeping its history. It spends one unit of the tenant's
// submission rate, as a create does: an update, too, is a write a tenant
// could otherwise repeat without bound.
func (s *server) updateSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop, spec, err := s.readSchedule(w, r, c.tenant, r.PathValue("name"))
	defer stop()
	if err == nil {
		_, err = s.schedules.Get(ctx, c.tenant, spec.Name) // one that does not exist spends nothing
	}
	if err == nil {
		err = s.limit(ctx, w, c.tenant, "")
	}
	var sch schedule.Schedule
	if err == nil {
		sch, err = s.schedules.Update(ctx, c.tenant, spec)
	}
	if err != nil {
		s.failSchedule(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sch)
}

// readSchedule reads a POST or PUT body into a spec and checks it as the
// schedule package will, so that a bad body is told what to fix and spends
// nothing; it returns the spec with the context of the Redis calls that
// follow, which the caller stops. name is the path's for a PUT, whose body
// may leave "name" out ("" for a POST).
func (s *server) readSchedule(w http.ResponseWriter, r *http.Request, tenant, name string) (context.Context, context.CancelFunc, schedule.Spec, error) {
	body, err := readJSONBody(w, r, s.maxBody)
	ctx, stop := s.redisContext(r.Context(), 0)
	var b scheduleBody
	if err == nil {
		_, err = decodeInto(body, &b)
	}
	if err != nil {
		return ctx, stop, schedule.Spec{}, err
	}
	if name != "" {
		if b.Name != "" && b.Name != name {
			return ctx, stop, schedule.Spec{}, fieldError("name", "must be the name in the path, or left out: a schedule is not renamed")
		}
		b.Name = name
	}
	spec := schedule.Spec{Name: b.Name, Cron: b.Cron, Timezone: b.Timezone, Overlap: b.Overlap}
	if spec.Job, err = s.decodeScheduledJob(ctx, tenant, b.Job); err != nil {
		return ctx, stop, spec, err
	}
	return ctx, stop, spec, spec.Validate()
}

// spendOnNew spends one unit of tenant's submission rate for a schedule of
// a new name, as a submission does for a new job: the same body again (200)
// or another body under a taken name (409) spends nothing. Two requests
// creating one name at once may both spend.
func (s *server) spendOnNew(ctx context.Context, w http.ResponseWriter, tenant, name string) error {
	_, err := s.schedules.Get(ctx, tenant, name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, schedule.ErrNotFound):
		return s.limit(ctx, w, tenant, "")
	}
	return err
}

// decodeScheduledJob decodes a schedule's job and checks it as POST
// /v1/jobs checks a submission, its keys' rules included, naming each
// field at fault as job.<field>.
func (s *server) decodeScheduledJob(ctx context.Context, tenant string, raw json.RawMessage) (job.Submission, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return job.Submission{}, fieldError("job", "is required: the submission each fire creates")
	}
	sub, given, err := decodeSubmission(raw)
	if err == nil {
		err = sub.ValidateGiven(given)
	}
	if err == nil {
		err = s.checkQueue(sub)
	}
	if err == nil {
		err = s.checkInput(tenant, sub)
	}
	if err == nil {
		err = s.store.Check(ctx, tenant, sub)
	}
	var bad *badRequest
	var invalid *job.ValidationError
	switch {
	case errors.As(err, &bad):
		for i := range bad.fields {
			bad.fields[i].Field = "job." + bad.fields[i].Field
		}
		if len(bad.fields) == 0 {
			return sub, fieldError("job", bad.detail)
		}
	case errors.As(err, &invalid):
		for i := range invalid.Errors {
			invalid.Errors[i].Field = "job." + invalid.Errors[i].Field
		}
	}
	return sub, err
}

// GET /v1/schedules
func (s *server) listSchedules(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	q := r.URL.Query()
	limit, err := queryLimit(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list, next, err := s.schedules.List(ctx, c.tenant, limit, q.Get("cursor"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page := scheduleList{Schedules: list}
	if next != "" {
		page.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, page)
}

// scheduleList is the body of GET /v1/schedules.
type scheduleList struct {
	Schedules  []schedule.Schedule `json:"schedules"`
	NextCursor *string             `json:"next_cursor"`
}

// GET /v1/schedules/{name}
func (s *server) getSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	sch, err := s.schedules.Get(ctx, c.tenant, r.PathValue("name"))
	if err != nil {
		s.failSchedule(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sch)
}

// DELETE /v1/schedules/{name}
func (s *server) deleteSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if err := s.schedules.Delete(ctx, c.tenant, r.PathValue("name")); err != nil {
		s.failSchedule(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// POST /v1/schedules/{name}/pause and .../resume
func (s *server) pauseSchedule(pause bool) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, c caller) {
		ctx, stop := s.redisContext(r.Context(), 0)
		defer stop()
		set := s.schedules.Resume
		if pause {
			set = s.schedules.Pause
		}
		sch, err := set(ctx, c.tenant, r.PathValue("name"))
		if err != nil {
			s.failSchedule(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, sch)
	}
}

// POST /v1/schedules/{name}/trigger: one fire now, which counts against
// the tenant's rate and cap like a submission.
func (s *server) triggerSchedule(w http.ResponseWriter, r *http.Request, c caller) {
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	name := r.PathValue("name")
	if _, err := s.schedules.Get(ctx, c.tenant, name); err != nil {
		s.failSchedule(w, r, err)
		return
	}
	if err := s.limit(ctx, w, c.tenant, ""); err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := s.schedules.Trigger(ctx, c.tenant, name, s.capOf())
	if err != nil {
		s.failSchedule(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, j)
}

func (s *server) failSchedule(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, schedule.ErrNotFound) {
		writeProblem(w, http.StatusNotFound, "no such schedule")
		return
	}
	s.fail(w, r, err)
}
