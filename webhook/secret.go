package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/job"
)

// secretPrefix starts a secret in the Standard Webhooks format:
// "whsec_" and the key in base64.
const secretPrefix = "whsec_"

// Secrets are the keys each tenant's deliveries are signed with, by
// tenant. A tenant with two (a rotation) gets both signatures on each
// delivery, which Standard Webhooks allows: a receiver that knows either
// key verifies it.
type Secrets map[string][][]byte

// ParseSecrets reads LEASEHOLD_WEBHOOK_SECRETS: comma-separated
// tenant:secret pairs, each secret "whsec_" and base64; a tenant named
// twice has two secrets ("acme:whsec_old,acme:whsec_new" while rotating).
func ParseSecrets(s string) (Secrets, error) {
	out := Secrets{}
	for pair := range strings.SplitSeq(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		tenant, secret, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("webhook secrets: %q is not tenant:whsec_<base64>", redact(pair))
		}
		if err := job.ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("webhook secrets: %w", err)
		}
		key, err := parseSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("webhook secrets: tenant %s: %w", tenant, err)
		}
		out[tenant] = append(out[tenant], key)
	}
	return out, nil
}

// parseSecret reads "whsec_<base64>" into its key.
func parseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("a secret must start with %s", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("a secret must be %s and at least 16 bytes in base64", secretPrefix)
	}
	return key, nil
}

// redact keeps a refused pair's secret out of an error message, which is
// logged.
func redact(pair string) string {
	if len(pair) > 8 {
		return pair[:8] + "…"
	}
	return pair
}

// Sign returns the webhook-signature header of a delivery per Standard
// Webhooks: "v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">" for
// each key, space-separated.
func Sign(keys [][]byte, id string, at time.Time, body []byte) string {
	signed := id + "." + strconv.FormatInt(at.Unix(), 10) + "."
	sigs := make([]string, len(keys))
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(signed))
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}
