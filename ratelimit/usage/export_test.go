package usage

// HoldWrites makes c's next write wait until release is called, as a write
// that is out does: a test gathers calls into one group with it.
func (c *Counters) HoldWrites() (release func()) {
	c.turn <- struct{}{}
	return func() { <-c.turn }
}

// Waiting is how many calls wait for c's next write.
func (c *Counters) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		return 0
	}
	return len(c.next.adds)
}
