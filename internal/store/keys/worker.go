package keys

// Workers is the registry of live workers: a sorted set of worker ids,
// each scored by when its entry expires (Redis clock, ms). It shares its
// hash tag with the entries, so one script writes an entry and the set.
func (s Space) Workers() string { return s.key("workers", "workers") }

// Worker is one live worker's entry in the registry: a hash of who it is
// and what it serves, which expires unless the worker renews it.
func (s Space) Worker(id string) string { return s.key("workers", "worker:"+id) }
