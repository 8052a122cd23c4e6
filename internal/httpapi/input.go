package httpapi

import (
	"errors"

	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
)

// checkInput refuses (400) the input of a built-in kind that its handler
// would refuse: a sleep tick under kinds.MinTick, a notify_url outside
// LEASEHOLD_NOTIFY_ALLOW. The worker checks again, with its own settings,
// before it runs the job.
func (s *server) checkInput(sub job.Submission) error {
	var bad *kinds.InputError
	if err := kinds.ValidateInput(sub.Kind, sub.Input, s.notifyAllow); errors.As(err, &bad) {
		return fieldError(bad.Field, bad.Message)
	} else if err != nil {
		return err
	}
	return nil
}
