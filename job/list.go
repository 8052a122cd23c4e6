package job

const (
	DefaultListLimit = 50
	MaxListLimit     = 500
	// MaxPageBytes bounds the jobs' fields one page holds (a result alone
	// may be 1 MiB, so 500 of them would be 500 MiB): a page ends early,
	// with its cursor, before it would pass it. It always holds one job.
	MaxPageBytes = 4 << 20
)

// ListQuery selects a page of jobs.
type ListQuery struct {
	// Tenant is the caller, whose jobs are listed. With Admin it is a filter
	// instead: one tenant's jobs, or every tenant's when "".
	Tenant string
	Admin  bool
	State  State  // "" = any
	Kind   string // "" = any
	Queue  string // "" = every queue
	Limit  int    // 1–500; 0 = 50
	Cursor string // next from the previous page; "" = from the newest
}

// Validate refuses a query List cannot serve, naming each bad field.
func (q ListQuery) Validate() error {
	if !q.Admin {
		if err := ValidateTenant(q.Tenant); err != nil {
			return err
		}
	}
	var v ValidationError
	if q.Admin && q.Tenant != "" && ValidateTenant(q.Tenant) != nil {
		v.Add("tenant", "must match %s", tenantPattern)
	}
	if q.State != "" && !q.State.valid() {
		v.Add("state", "unknown state %q", q.State)
	}
	if q.Kind != "" && !kindPattern.MatchString(q.Kind) {
		v.Add("kind", "must match %s", kindPattern)
	}
	if q.Queue != "" && !queuePattern.MatchString(q.Queue) {
		v.Add("queue", "must match %s", queuePattern)
	}
	if q.Limit < 0 || q.Limit > MaxListLimit {
		v.Add("limit", "must be between 1 and %d", MaxListLimit)
	}
	return v.Err()
}

// Matches reports whether j is one of the jobs q selects.
func (q ListQuery) Matches(j Job) bool {
	return (q.State == "" || j.State == q.State) && (q.Kind == "" || j.Kind == q.Kind) &&
		(q.Tenant == "" || j.Tenant == q.Tenant)
}
