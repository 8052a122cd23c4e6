package webhook

import (
	"errors"

	"github.com/leasehold/leasehold/kinds"
)

// Policy says which webhooks may be called: URLs that Allow allows
// (LEASEHOLD_WEBHOOK_ALLOW, the same rule as a sleep job's notify_url), of
// tenants that have a secret to sign with (LEASEHOLD_WEBHOOK_SECRETS). The
// API checks it at submit; the drainer checks it again before each try,
// with its own settings.
type Policy struct {
	Allow   kinds.NotifyAllow
	Secrets Secrets
}

// Errors of Policy.Check.
var (
	ErrNotAllowed = errors.New("the URL does not start with a prefix of LEASEHOLD_WEBHOOK_ALLOW")
	ErrNoSecret   = errors.New("the tenant has no secret in LEASEHOLD_WEBHOOK_SECRETS to sign with")
)

// Check returns ErrNotAllowed or ErrNoSecret when tenant's webhook to url
// may not be called, and nil when it may.
func (p Policy) Check(tenant, url string) error {
	if !p.Allow.Allows(url) {
		return ErrNotAllowed
	}
	if len(p.Secrets[tenant]) == 0 {
		return ErrNoSecret
	}
	return nil
}
