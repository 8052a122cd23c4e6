package keys

import "time"

// Rate-limit keys. Everything of one subject shares the hash tag
// {rl:<subject>}, so each limiter script touches one slot. The window length
// is part of a window key: counts kept for one window length mean nothing
// under another, so a changed policy starts afresh instead of misreading
// them. A bucket has no window; buckets of different rates on one subject
// share their tokens, so replicas mid-way through a rate change still limit
// together. Subjects are validated by package ratelimit before they get here:
// no braces, so no subject can change its key's hash tag.

// RateBucket is the hash of a subject's token bucket: tokens and the Redis
// time they were counted at.
func (s Space) RateBucket(subject string) string { return s.key("rl:"+subject, "bucket") }

// RateLog is the sorted set of a subject's admitted requests within the last
// window (member: unique id, score: Redis time in µs).
func (s Space) RateLog(subject string, window time.Duration) string {
	return s.key("rl:"+subject, "log:"+window.String())
}

// RateWindow is the hash of a subject's sliding window counter: the number
// of the current fixed window and the counts of it and the one before.
func (s Space) RateWindow(subject string, window time.Duration) string {
	return s.key("rl:"+subject, "window:"+window.String())
}

// RateFixed is a subject's counter for the current fixed window. It expires
// when that window ends.
func (s Space) RateFixed(subject string, window time.Duration) string {
	return s.key("rl:"+subject, "fixed:"+window.String())
}

// Usage keys. Everything of one tenant shares the hash tag {usage:<tenant>},
// so a mark and the count it guards are written by one script in one slot.
// Tenants, counters and event ids are validated by package usage: no braces,
// and no colon in a counter name, so no (counter, event id) pair can spell
// another's mark.

// UsageDay is the hash of a tenant's counts for the UTC day of day
// (field: counter name, value: count).
func (s Space) UsageDay(tenant string, day time.Time) string {
	return s.key("usage:"+tenant, "day:"+day.UTC().Format(time.DateOnly))
}

// UsageSeen is the hash of a tenant's marks of the events counted with a
// time on the UTC day of day (field: an event's mark, a digest of
// "<counter>:<event id>"; value: the n counted), so a retried write is not
// counted twice.
func (s Space) UsageSeen(tenant string, day time.Time) string {
	return s.key("usage:"+tenant, "seen:"+day.UTC().Format(time.DateOnly))
}
