package job

import (
	"fmt"
)

// ValidateQueue reports whether name can name a queue: workers check the
// queues they are configured with by the same rule as submissions.
func ValidateQueue(name string) error {
	if !queuePattern.MatchString(name) {
		return fmt.Errorf("queue %q: must match %s", name, queuePattern)
	}
	return nil
}

// ValidateKind reports whether kind can name a job kind: workers check the
// kinds they serve by remote handlers by the same rule as submissions.
func ValidateKind(kind string) error {
	if !kindPattern.MatchString(kind) {
		return fmt.Errorf("kind %q: must match %s", kind, kindPattern)
	}
	return nil
}
