package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// usageReport is the body of GET /v1/usage.
type usageReport struct {
	Tenant string     `json:"tenant"`
	From   string     `json:"from"`
	To     string     `json:"to"`
	Days   []usageDay `json:"days"`
}

// usageDay is one UTC day's counts; a counter with no usage is absent.
type usageDay struct {
	Date   string           `json:"date"`
	Counts map[string]int64 `json:"counts"`
}

// GET /v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD[&tenant=]: the caller's
// counts for each UTC day of the range, both ends included. Only the admin
// may name another tenant; the admin without tenant= reads its own.
func (s *server) getUsage(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	tenant, err := usageTenant(q, c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	from, to, err := usageRange(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	// The tenant's counters (tokens), and what its jobs' queues counted of
	// their lives.
	days, err := s.usage.Get(ctx, tenant, from, to)
	if errors.Is(err, usage.ErrInvalid) {
		err = fieldError("tenant", "must be 1 to 256 bytes, without braces") // the dates were checked above
	}
	if err == nil {
		err = s.store.AddUsage(ctx, tenant, usage.Lifecycle(), days)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := usageReport{Tenant: tenant, From: from.Format(time.DateOnly), To: to.Format(time.DateOnly), Days: make([]usageDay, len(days))}
	for i, d := range days {
		out.Days[i] = usageDay{Date: d.Date.Format(time.DateOnly), Counts: d.Counts}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// usageTenant is whose usage a request reads.
func usageTenant(q url.Values, c caller) (string, error) {
	if !q.Has("tenant") {
		return c.tenant, nil
	}
	t := q.Get("tenant")
	switch {
	case !c.admin && t != c.tenant:
		return "", fieldError("tenant", "only the admin tenant may read another tenant's usage")
	case t == "":
		return "", fieldError("tenant", "must name a tenant")
	}
	return t, nil
}

// usageRange reads from and to, both required UTC dates, from ≤ to, at
// most usage.MaxDays days.
func usageRange(q url.Values) (from, to time.Time, err error) {
	var fields []job.FieldError
	date := func(name string) time.Time {
		t, err := time.Parse(time.DateOnly, q.Get(name))
		if err != nil {
			fields = append(fields, job.FieldError{Field: name, Message: "must be a date, YYYY-MM-DD"})
		}
		return t
	}
	from, to = date("from"), date("to")
	if len(fields) == 0 {
		switch days := int(to.Sub(from)/(24*time.Hour)) + 1; {
		case days < 1:
			fields = append(fields, job.FieldError{Field: "to", Message: "must not be before from"})
		case days > usage.MaxDays:
			fields = append(fields, job.FieldError{Field: "to", Message: fmt.Sprintf("must be at most %d days after from, both included", usage.MaxDays-1)})
		}
	}
	if len(fields) > 0 {
		return from, to, &badRequest{detail: "the range is invalid: see errors", fields: fields}
	}
	return from, to, nil
}
