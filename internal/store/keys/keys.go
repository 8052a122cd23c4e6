// Package keys is the one place that knows Leasehold's Redis key names.
//
// Every key is "<prefix>{<tag>}:<kind>". The part in braces is the Redis
// Cluster hash tag: keys that one script touches together share it, so they
// live in one hash slot and the script stays atomic on a cluster. Domain
// packages ask this package for keys and never format one themselves.
package keys

// DefaultPrefix is the prefix used when a component's config leaves it empty.
const DefaultPrefix = "leasehold:"

// Space builds keys under one prefix. Tests give each test its own prefix, so
// they share a Redis without seeing each other's keys.
type Space struct {
	prefix string
}

// New returns a Space whose keys start with prefix ("" means DefaultPrefix).
func New(prefix string) Space {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Space{prefix: prefix}
}

// Prefix returns the prefix every key of this space starts with.
func (s Space) Prefix() string { return s.prefix }

func (s Space) key(tag, kind string) string {
	return s.prefix + "{" + tag + "}:" + kind
}

// LeaseSet is the sorted set of live leases on a lease key
// (member: holder, score: expiry in Redis-clock milliseconds).
func (s Space) LeaseSet(key string) string { return s.key("lease:"+key, "leases") }

// LeaseFence is the fencing-token counter of a lease key. It shares the lease
// set's slot, so a token is issued in the same script as the acquisition.
func (s Space) LeaseFence(key string) string { return s.key("lease:"+key, "fence") }

// LeaseTurn says whose turn the next free slot of a lease key is while
// both sides wait for it: "line" (Wait's tickets) or "jobs" (callers of
// acquire: queued jobs, Acquire). See internal/store/scripts/lease_acquire.lua.
func (s Space) LeaseTurn(key string) string { return s.key("lease:"+key, "turn") }

// LeaseWaiting is a short-lived mark that acquire callers were refused a
// slot of a lease key: they wait, and the line leaves them every other slot.
func (s Space) LeaseWaiting(key string) string { return s.key("lease:"+key, "waiting") }

// LeaseWindow is the rolling minute of a lease key with a budget: holder →
// when its execution started (see internal/store/scripts/budget.lua).
func (s Space) LeaseWindow(key string) string { return s.key("lease:"+key, "window") }

// LeaseSpent holds the tokens of each holder in a lease key's window, and
// their sum.
func (s Space) LeaseSpent(key string) string { return s.key("lease:"+key, "spent") }

// LeaseThrottle says until when the upstream behind a lease key asked to be
// left alone (a Retry-After).
func (s Space) LeaseThrottle(key string) string { return s.key("lease:"+key, "throttle") }

// LeaseAdapt is an adaptive lease key's effective limit and its state.
func (s Space) LeaseAdapt(key string) string { return s.key("lease:"+key, "adapt") }

// LeaseHistory is an adaptive lease key's last hour, per minute: its
// effective limit and pushbacks (internal/store/scripts/lease_settle.lua).
func (s Space) LeaseHistory(key string) string { return s.key("lease:"+key, "history") }

// Fenced is the hash of a fenced resource: the highest token seen and the
// value written with it.
func (s Space) Fenced(resource string) string { return s.key("fenced:"+resource, "fenced") }

// CancelFlag is the TTL'd flag that says "stop id".
func (s Space) CancelFlag(id string) string { return s.key("cancel:"+id, "flag") }
