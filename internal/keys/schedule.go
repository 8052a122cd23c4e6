package keys

// Schedule keys. Every schedule of every tenant shares the hash tag
// {schedules}: the due index spans them all, and a fire's compare-and-set
// touches the index and the record in one script. (Its job lives in the
// job's queue slot, another slot: see internal/scripts/schedule_advance.lua.)
// Tenant and schedule names are validated before they get here and hold no
// '/', so "<tenant>/<name>" names one schedule.

// ScheduleDue is the due-time index: member "<tenant>/<name>", score the
// Redis-clock milliseconds at which a scheduler should next look at it
// (its next_run_at, or later while a fire of it is in hand or deferred).
func (s Space) ScheduleDue() string { return s.key("schedules", "due") }

// Schedule is the hash of one schedule's record.
func (s Space) Schedule(tenant, name string) string {
	return s.key("schedules", "s:"+tenant+"/"+name)
}

// TenantSchedules is the sorted set of a tenant's schedule names (all
// scored 0, so they list in name order).
func (s Space) TenantSchedules(tenant string) string {
	return s.key("schedules", "tenant:"+tenant)
}
