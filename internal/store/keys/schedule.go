package keys

// Schedule keys. Every schedule of every tenant shares the hash tag
// {schedules}: one take reads many tenants' due indexes, and a fire's
// compare-and-set touches the record and the indexes in one script. (Its job lives in the
// job's queue slot, another slot: see internal/store/scripts/schedule_advance.lua.)
// Tenant and schedule names are validated before they get here and hold no
// '/' or ':', so "<tenant>/<name>" names one schedule and no tenant's key
// is another's.

// ScheduleTenants is the index of the tenants that have schedules to
// fire: member the tenant, score the Redis-clock milliseconds at which a
// scheduler should next look at its ScheduleTenantDue (at or before the
// earliest there; a tenant with more due than one read takes waits behind
// the others).
func (s Space) ScheduleTenants() string { return s.key("schedules", "due-tenants") }

// ScheduleTenantDue is one tenant's due-time index: member the schedule's
// name, score the Redis-clock milliseconds at which a scheduler should
// next look at it (its next_run_at, or later while a fire of it is in
// hand or deferred).
func (s Space) ScheduleTenantDue(tenant string) string {
	return s.key("schedules", "due:"+tenant)
}

// Schedule is the hash of one schedule's record.
func (s Space) Schedule(tenant, name string) string {
	return s.key("schedules", "s:"+tenant+"/"+name)
}

// TenantSchedules is the sorted set of a tenant's schedule names (all
// scored 0, so they list in name order).
func (s Space) TenantSchedules(tenant string) string {
	return s.key("schedules", "tenant:"+tenant)
}
