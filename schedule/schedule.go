package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/job"
)

// Overlap says whether a schedule fires while the job it fired last has
// not ended.
type Overlap string

const (
	// OverlapAllow fires at every due time. The default.
	OverlapAllow Overlap = "allow"
	// OverlapSkip skips a due time while the last fired job has not ended.
	OverlapSkip Overlap = "skip"
)

// DefaultTimezone is the time zone of a schedule that names none.
const DefaultTimezone = "UTC"

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// The cron syntax: five fields (minute to weekday) or a descriptor (@hourly,
// @daily, @weekly, @monthly, @yearly, @every <duration>). No seconds field.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is the body of POST /v1/schedules: what a schedule fires and when.
// Zero values mean the defaults: Timezone DefaultTimezone, Overlap
// OverlapAllow.
type Spec struct {
	Name     string         `json:"name"`
	Cron     string         `json:"cron"`
	Timezone string         `json:"timezone,omitempty"`
	Job      job.Submission `json:"job"`
	Overlap  Overlap        `json:"overlap,omitempty"`
}

// Schedule is a schedule as the API shows it.
type Schedule struct {
	Name     string         `json:"name"`
	Cron     string         `json:"cron"`
	Timezone string         `json:"timezone"`
	Job      job.Submission `json:"job"`
	Overlap  Overlap        `json:"overlap"`
	Paused   bool           `json:"paused"`
	// NextRunAt is the next due time; nil while paused.
	NextRunAt *time.Time `json:"next_run_at"`
	// LastRunAt is the due time of the last fire (a trigger's: when it was
	// triggered); nil before the first.
	LastRunAt *time.Time `json:"last_run_at"`
	LastJobID *string    `json:"last_job_id"`
	CreatedAt time.Time  `json:"created_at"`

	Tenant string `json:"-"`

	gen  string    // a fresh id per creation: a re-created name fires anew
	spec string    // the spec as stored (canonical JSON)
	next time.Time // the due time, also while paused
}

// MarshalJSON writes times as the API does: RFC 3339, milliseconds, UTC.
func (s Schedule) MarshalJSON() ([]byte, error) {
	type plain Schedule
	return json.Marshal(struct {
		plain
		NextRunAt *stamp `json:"next_run_at"`
		LastRunAt *stamp `json:"last_run_at"`
		CreatedAt stamp  `json:"created_at"`
	}{plain(s), (*stamp)(s.NextRunAt), (*stamp)(s.LastRunAt), stamp(s.CreatedAt)})
}

type stamp time.Time

func (s stamp) MarshalJSON() ([]byte, error) { return []byte(`"` + format(time.Time(s)) + `"`), nil }

func format(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Validate checks spec as Create does, without Redis: an invalid spec
// returns a *job.ValidationError naming each field at fault. (The API
// checks a body with it before it spends the tenant's rate.)
func (spec Spec) Validate() error {
	_, cr, _, err := spec.normalize()
	if err == nil && cr.Next(time.Now()).IsZero() {
		return neverDue()
	}
	return err
}

// neverDue is the error of a cron expression with no due time after now.
func neverDue() error {
	return &job.ValidationError{Errors: []job.FieldError{{Field: "cron", Message: "never comes due"}}}
}

// normalize validates spec and returns it with its defaults applied, the
// parsed cron expression, and the spec's canonical JSON: two requests that
// mean the same schedule have the same.
func (spec Spec) normalize() (Spec, cron.Schedule, string, error) {
	var v job.ValidationError
	add := func(field, format string, args ...any) {
		v.Errors = append(v.Errors, job.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if !namePattern.MatchString(spec.Name) {
		add("name", "must match %s", namePattern)
	}
	if spec.Timezone == "" {
		spec.Timezone = DefaultTimezone
	}
	if spec.Overlap == "" {
		spec.Overlap = OverlapAllow
	}
	if spec.Overlap != OverlapAllow && spec.Overlap != OverlapSkip {
		add("overlap", "must be %q or %q", OverlapAllow, OverlapSkip)
	}
	loc, err := time.LoadLocation(spec.Timezone)
	if err != nil || spec.Timezone == "Local" {
		add("timezone", "must be an IANA time zone name such as Europe/Berlin")
	}
	sched, err := parseCron(spec.Cron)
	if err != nil {
		add("cron", "%v", err)
	}
	// A fire adds scheduled_for to the metadata and must never be refused,
	// so the job is checked as a fire submits it.
	fired, err := fireSubmission(spec.Job, spec.Name, time.Now())
	if err == nil {
		err = fired.Validate()
	}
	var invalid *job.ValidationError
	switch {
	case err == nil:
	case errors.As(err, &invalid):
		for _, f := range invalid.Errors {
			add("job."+f.Field, "%s", f.Message)
		}
	default:
		add("job.metadata", "%v", err)
	}
	if len(v.Errors) > 0 {
		return spec, nil, "", &v
	}
	if loc != nil {
		sched = located{sched, loc}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return spec, nil, "", err
	}
	canon, err := canonical(b)
	return spec, sched, canon, err
}

// parseCron parses a cron expression with robfig/cron, refusing what the
// API does not offer: a time zone inside it (that is the timezone field)
// and an @every shorter than a second or not in whole seconds (robfig
// would round it).
func parseCron(expr string) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("is required")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("must not name a time zone: use the timezone field")
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Second || every%time.Second != 0 {
			return nil, fmt.Errorf(`@every takes a duration of whole seconds, at least "1s", such as "@every 30s"`)
		}
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf(`must be five fields (minute hour day-of-month month day-of-week), @hourly, @daily or "@every 30s": %v`, err)
	}
	return sched, nil
}

// located evaluates a cron schedule in its time zone: robfig/cron reads the
// fields in the location of the time it is given.
type located struct {
	cron.Schedule
	loc *time.Location
}

func (l located) Next(t time.Time) time.Time { return l.Schedule.Next(t.In(l.loc)).UTC() }

// Next returns the first due time of the schedule with cron expression
// expr in time zone tz after t, as the scheduler computes it. It is what
// the tests of the time-zone behaviour drive.
func Next(expr, tz string, t time.Time) (time.Time, error) {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return time.Time{}, err
	}
	sched, err := parseCron(expr)
	if err != nil {
		return time.Time{}, err
	}
	return located{sched, loc}.Next(t), nil
}

// fireSubmission is the submission of sub that a fire for due time due
// submits: its metadata gains scheduled_for, and it names the schedule.
func fireSubmission(sub job.Submission, name string, due time.Time) (job.Submission, error) {
	meta := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(sub.Metadata); len(t) > 0 && string(t) != "null" {
		if err := json.Unmarshal(t, &meta); err != nil {
			return sub, fmt.Errorf("must be a JSON object")
		}
	}
	meta["scheduled_for"] = json.RawMessage(`"` + format(due) + `"`)
	b, err := json.Marshal(meta)
	if err != nil {
		return sub, err
	}
	sub.Metadata = b
	sub.Schedule = name
	return sub, nil
}

// canonical re-encodes JSON with object keys sorted and no white space;
// numbers stay as written.
func canonical(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
