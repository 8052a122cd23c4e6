package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/job"
)

// AdminTenant is the tenant whose keys see and act on every tenant's jobs.
const AdminTenant = "admin"

// Keys maps API keys to tenants. The zero value holds no key.
type Keys struct {
	entries []keyEntry
	names   []byte // the key of the opaque worker names tenants see (shown.go)
}

// keyEntry keeps a key's SHA-256, not the key: comparing digests of one
// length takes the same time whatever the key's length.
type keyEntry struct {
	tenant string
	sum    [sha256.Size]byte
}

// MinKeyLength is the fewest characters an API key may have: a short key
// can be guessed online, where every try costs only a request.
const MinKeyLength = 16

// placeholders are words that mark a key as an example, not a secret: a
// key that contains one, ignoring case, '-' and '_', is refused (a file
// that ships "admin:REPLACE-ME" must not start an API anyone can use).
var placeholders = []string{"replaceme", "changeme", "placeholder", "example"}

// ParseKeys reads keys in LEASEHOLD_API_KEYS' form: comma-separated
// tenant:key pairs, such as "acme:k1,admin:k2". The key is everything after
// the first colon; white space around a pair is ignored. A tenant may have
// several keys (to rotate them); one key may not stand for two entries. A
// key shorter than MinKeyLength, or one that reads as a placeholder
// (REPLACE-ME, changeme, example...), is refused.
// Errors name the pair by position and never show a key.
func ParseKeys(s string) (Keys, error) {
	var k Keys
	seen := map[[sha256.Size]byte]bool{}
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		tenant, key, ok := strings.Cut(pair, ":")
		switch {
		case !ok:
			return Keys{}, fmt.Errorf("api keys: pair %d: want tenant:key", i+1)
		case tenant == "":
			return Keys{}, fmt.Errorf("api keys: pair %d: empty tenant", i+1)
		case key == "":
			return Keys{}, fmt.Errorf("api keys: pair %d (tenant %s): empty key", i+1, tenant)
		case strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }):
			return Keys{}, fmt.Errorf("api keys: pair %d (tenant %s): a key must be printable ASCII without spaces", i+1, tenant)
		case len(key) < MinKeyLength:
			return Keys{}, fmt.Errorf("api keys: pair %d (tenant %s): a key must have at least %d characters (e.g. openssl rand -hex 32)",
				i+1, tenant, MinKeyLength)
		case placeholder(key):
			return Keys{}, fmt.Errorf("api keys: pair %d (tenant %s): the key is a placeholder; generate one, e.g. openssl rand -hex 32", i+1, tenant)
		}
		if err := job.ValidateTenant(tenant); err != nil {
			return Keys{}, fmt.Errorf("api keys: pair %d: %w", i+1, err)
		}
		e := keyEntry{tenant: tenant, sum: sha256.Sum256([]byte(key))}
		if seen[e.sum] {
			return Keys{}, fmt.Errorf("api keys: pair %d (tenant %s): duplicate key", i+1, tenant)
		}
		seen[e.sum] = true
		k.entries = append(k.entries, e)
	}
	if len(k.entries) == 0 {
		return Keys{}, errors.New("api keys: none given; want tenant:key[,tenant:key...]")
	}
	k.names = namesKey(k.entries)
	return k, nil
}

// placeholder says whether key reads as one of placeholders.
func placeholder(key string) bool {
	folded := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(key))
	return slices.ContainsFunc(placeholders, func(p string) bool { return strings.Contains(folded, p) })
}

// Len is the number of keys.
func (k Keys) Len() int { return len(k.entries) }

// Tenant returns the tenant of key. It compares key with every configured
// key in constant time and does not stop at a match, so the time it takes
// says nothing about which key, or how much of one, matched.
func (k Keys) Tenant(key string) (tenant string, ok bool) {
	sum := sha256.Sum256([]byte(key))
	found, at := 0, 0
	for i, e := range k.entries {
		eq := subtle.ConstantTimeCompare(sum[:], e.sum[:])
		at = subtle.ConstantTimeSelect(eq, i, at)
		found |= eq
	}
	if found == 0 {
		return "", false
	}
	return k.entries[at].tenant, true
}

// caller is who made a request.
type caller struct {
	tenant string
	admin  bool
}

// tenantOf returns the tenant whose API key r bears (Authorization:
// Bearer <key>); false for none or an unknown one.
func (s *server) tenantOf(r *http.Request) (string, bool) {
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	tenant, ok := s.keys.Tenant(strings.TrimLeft(key, " ")) // RFC 9110: one or more spaces
	return tenant, ok && strings.EqualFold(scheme, "Bearer")
}

// authed wraps h with authentication: a request without a known bearer key
// is answered 401 and never reaches h.
func (s *server) authed(h func(http.ResponseWriter, *http.Request, caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := s.tenantOf(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
			writeProblem(w, http.StatusUnauthorized, "missing or unknown API key: send Authorization: Bearer <key>")
			return
		}
		h(w, r, caller{tenant: tenant, admin: tenant == AdminTenant})
	}
}
