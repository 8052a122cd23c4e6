package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/job"
)

// limitList is the body of GET /v1/limits.
type limitList struct {
	Limits     []job.Limit `json:"limits"`
	NextCursor *string     `json:"next_cursor"`
}

// limitBody is the body of PUT and PATCH /v1/limits/{key}: every field
// optional, at least one given.
type limitBody struct {
	Limit    *int64 `json:"limit"`
	RPM      int64  `json:"rpm"`
	TPM      int64  `json:"tpm"`
	Adaptive bool   `json:"adaptive"`
	// PerTenant is the most slots one tenant may hold, and its share of
	// rpm and tpm; it needs a limit.
	PerTenant int64 `json:"per_tenant"`
}

// GET /v1/limits: a page of the configured limits with their leases in
// use, by key (limit, cursor, next_cursor as GET /v1/jobs). Any tenant may
// read them, since its jobs wait on them, except another tenant's own key
// (tenant:<name>), which would show who else uses the service and how
// much; the admin sees every key.
func (s *server) listLimits(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	limit, err := queryLimit(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	limits, next, err := s.store.LimitsPage(ctx, job.LimitsQuery{Limit: limit, Cursor: q.Get("cursor"), Keep: c.mayRead})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page := limitList{Limits: limits}
	if next != "" {
		page.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, page)
}

// mayRead reports whether c may see key's limit: any key but another
// tenant's own.
func (c caller) mayRead(key string) bool {
	return c.admin || !strings.HasPrefix(key, "tenant:") || key == "tenant:"+c.tenant || key == "tenant:*"
}

// limitHistory is the body of GET /v1/limits/{key}/history.
type limitHistory struct {
	Key     string            `json:"key"`
	Minutes []job.LimitMinute `json:"minutes"`
}

// GET /v1/limits/{key}/history: an adaptive key's last hour, per minute
// (its effective limit and pushbacks), oldest first, minutes without a
// settlement left out. The catch-all route holds keys with '/', so the
// suffix is cut here; any other GET under /v1/limits/ is unknown. Read as
// GET /v1/limits is: another tenant's key is a 404.
func (s *server) limitHistory(w http.ResponseWriter, r *http.Request, c caller) {
	key, ok := strings.CutSuffix(r.PathValue("key"), "/history")
	if !ok || !c.mayRead(key) {
		notFound(w, r)
		return
	}
	if err := job.ValidateLimitKey(key); err != nil {
		s.fail(w, r, fieldError("key", err.Error()))
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	minutes, err := s.store.LimitHistory(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, limitHistory{Key: key, Minutes: minutes})
}

// PUT /v1/limits/{key...}: set a key's whole configuration, admin only: a
// field left out is removed.
func (s *server) putLimit(w http.ResponseWriter, r *http.Request, c caller) {
	key, b, _, ok := s.readLimit(w, r, c, false)
	if !ok {
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	kl := job.KeyLimit{Limit: b.Limit, Budget: job.Budget{RPM: b.RPM, TPM: b.TPM, Adaptive: b.Adaptive, PerTenant: b.PerTenant}}
	if err := s.store.SetKeyLimit(ctx, key, kl); err != nil {
		s.fail(w, r, err)
		return
	}
	s.answerLimit(ctx, w, r, key)
}

// PATCH /v1/limits/{key...}: change some of a key's configuration, admin
// only. The body is a JSON merge patch: a field given replaces the key's,
// null removes it, a field left out stays.
func (s *server) patchLimit(w http.ResponseWriter, r *http.Request, c caller) {
	key, b, given, ok := s.readLimit(w, r, c, true)
	if !ok {
		return
	}
	// opt is a field of the patch: nil when left out, not Set when null.
	opt := func(name string, n int64) *job.Optional {
		set, ok := given[name]
		if !ok {
			return nil
		}
		return &job.Optional{Value: n, Set: set}
	}
	var limit int64
	if b.Limit != nil {
		limit = *b.Limit
	}
	p := job.LimitPatch{Limit: opt("limit", limit), RPM: opt("rpm", b.RPM), TPM: opt("tpm", b.TPM),
		PerTenant: opt("per_tenant", b.PerTenant)}
	if set, ok := given["adaptive"]; ok {
		on := set && b.Adaptive
		p.Adaptive = &on
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	if _, err := s.store.PatchKeyLimit(ctx, key, p); err != nil {
		s.fail(w, r, err)
		return
	}
	s.answerLimit(ctx, w, r, key)
}

// readLimit reads a PUT or PATCH (patch) of a key's limit: admin only,
// anyone else gets the 404 of an unknown path; then the key and the body
// (decodeLimit). ok is false when it answered the request already.
func (s *server) readLimit(w http.ResponseWriter, r *http.Request, c caller, patch bool) (key string, b limitBody, given map[string]bool, ok bool) {
	if !c.admin {
		notFound(w, r)
		return "", b, nil, false
	}
	key = r.PathValue("key")
	if err := job.ValidateLimitKey(key); err != nil {
		s.fail(w, r, fieldError("key", err.Error()))
		return "", b, nil, false
	}
	body, err := readJSONBody(w, r, s.maxBody)
	if err == nil {
		b, given, err = decodeLimit(body, patch)
	}
	if err != nil {
		s.fail(w, r, err)
		return "", b, nil, false
	}
	return key, b, given, true
}

// answerLimit answers a write of key's limit with the key as GET
// /v1/limits lists it.
func (s *server) answerLimit(ctx context.Context, w http.ResponseWriter, r *http.Request, key string) {
	limits, _, err := s.store.LimitsPage(ctx, job.LimitsQuery{Limit: 1, Keep: func(k string) bool { return k == key }})
	if err == nil && len(limits) == 0 {
		err = errors.New("httpapi: the limit set is not in the listing")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, limits[0])
}

// DELETE /v1/limits/{key...}: remove a limit, admin only: 204, or 404 when
// there was none.
func (s *server) deleteLimit(w http.ResponseWriter, r *http.Request, c caller) {
	if !c.admin {
		notFound(w, r)
		return
	}
	key := r.PathValue("key")
	if err := job.ValidateLimitKey(key); err != nil {
		s.fail(w, r, fieldError("key", err.Error()))
		return
	}
	ctx, stop := s.redisContext(r.Context(), 0)
	defer stop()
	existed, err := s.store.DeleteLimit(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !existed {
		writeProblem(w, http.StatusNotFound, "no limit is set on "+key)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// decodeLimit parses a PUT or PATCH body: {"limit": N, "rpm": N, "tpm": N,
// "adaptive": true, "per_tenant": N}, every field optional and at least one given, each of
// its type; null (removal) only in a patch. given names the fields the
// body gave: true for a value, false for null. Unknown fields and wrong
// types are named; the ranges are job's to check.
func decodeLimit(body []byte, patch bool) (b limitBody, given map[string]bool, err error) {
	raw, err := decodeObject(body)
	if err != nil {
		return b, nil, err
	}
	target := jsonFields(&b)
	given = make(map[string]bool, len(raw))
	var fields []job.FieldError
	for name, value := range raw {
		field, ok := target(name)
		switch {
		case !ok:
			fields = append(fields, job.FieldError{Field: name, Message: "unknown field"})
		case isNullJSON(value) && patch:
			given[name] = false
		case isNullJSON(value):
			fields = append(fields, job.FieldError{Field: name, Message: "must not be null: leave it out"})
		default:
			given[name] = true
			if msg := decodeField(value, field); msg != "" {
				fields = append(fields, job.FieldError{Field: name, Message: msg})
			}
		}
	}
	for name, n := range map[string]int64{"rpm": b.RPM, "tpm": b.TPM, "per_tenant": b.PerTenant} {
		if given[name] && n < 1 {
			fields = append(fields, job.FieldError{Field: name, Message: "must be at least 1"})
		}
	}
	if len(raw) == 0 {
		fields = append(fields, job.FieldError{Field: "limit", Message: "give at least one of limit, rpm, tpm, adaptive and per_tenant"})
	}
	if len(fields) > 0 {
		slices.SortFunc(fields, func(a, b job.FieldError) int { return strings.Compare(a.Field, b.Field) })
		return b, nil, &badRequest{detail: `the body must be {"limit": N, "rpm": N, "tpm": N, "adaptive": true, "per_tenant": N}, at least one of them: see errors`, fields: fields}
	}
	return b, given, nil
}

func isNullJSON(raw []byte) bool { return strings.TrimSpace(string(raw)) == "null" }
