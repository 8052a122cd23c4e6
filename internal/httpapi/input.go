package httpapi

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/kinds"
)

// checkQueue refuses (400) a queue this API does not accept: queues no
// worker serves would keep their jobs forever, and every listing and
// every lookup of an unknown id walks all the queues there are. With
// Config.Kinds set, it refuses a kind outside them too: a mistyped kind
// would wait for a worker that never comes.
func (s *server) checkQueue(sub job.Submission) error {
	q := cmp.Or(sub.Queue, job.DefaultQueue)
	if !slices.Contains(s.queues, q) {
		return fieldError("queue", fmt.Sprintf("%q is not a queue this service accepts jobs for; it accepts %s", q, strings.Join(s.queues, ", ")))
	}
	if len(s.kinds) > 0 && !slices.Contains(s.kinds, sub.Kind) {
		return fieldError("kind", fmt.Sprintf("%q is not a kind this service accepts jobs of; it accepts %s", sub.Kind, strings.Join(s.kinds, ", ")))
	}
	return nil
}

// checkInput refuses (400) the input of a built-in kind that its handler
// would refuse: a sleep tick under kinds.MinTick, a notify_url outside
// LEASEHOLD_NOTIFY_ALLOW; and a webhook that the webhook policy refuses
// for tenant. The worker checks again, with its own settings, before it
// runs the job or calls the webhook.
func (s *server) checkInput(tenant string, sub job.Submission) error {
	if sub.Webhook != nil {
		if err := s.webhooks.Check(tenant, sub.Webhook.URL); err != nil {
			return fieldError("webhook.url", err.Error())
		}
	}
	var bad *kinds.InputError
	if err := kinds.ValidateInput(sub.Kind, sub.Input, s.notifyAllow); errors.As(err, &bad) {
		return fieldError(bad.Field, bad.Message)
	} else if err != nil {
		return err
	}
	return nil
}
