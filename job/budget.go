package job

import (
	"fmt"
	"strconv"
	"strings"
)

// Budget is what an upstream allows a key besides its concurrency: requests
// and tokens per rolling minute, fleet-wide, and whether the key's
// concurrency adapts to the upstream's pushback. The zero Budget is none.
// The claims of jobs (package execution) check and reserve it in the same
// step as a slot, and so does Semaphore.Wait's line when given it
// (WaitConfig.Budget).
type Budget struct {
	RPM      int64 // executions that may start per rolling minute; 0: no budget
	TPM      int64 // tokens per rolling minute; 0: no budget
	Adaptive bool  // the effective limit follows the upstream's pushback
	// PerTenant is the most slots one tenant may hold of the key, and the
	// same share of its limit's RPM and TPM; 0: no share. The key does not
	// enforce it itself: a claim asks for a slot of the tenant's share key
	// too (package execution), a key of its own with that limit and budget.
	PerTenant int64
}

// Share is one tenant's share of a key whose limit is limit and budget b:
// PerTenant/limit of its RPM and TPM, at least 1 each where b has one; the
// zero Budget when b has no PerTenant or limit is not above 0.
func (b Budget) Share(limit int64) Budget {
	if b.PerTenant <= 0 || limit <= 0 {
		return Budget{}
	}
	part := min(b.PerTenant, limit)
	share := func(n int64) int64 {
		if n <= 0 {
			return 0
		}
		// n·part/limit without overflow: n is at most MaxBudget.
		return max(n/limit*part+n%limit*part/limit, 1)
	}
	return Budget{RPM: share(b.RPM), TPM: share(b.TPM)}
}

// IsZero reports whether b is no budget of the key itself: no rpm, tpm or
// adaptation (a per-tenant share is enforced through share keys).
func (b Budget) IsZero() bool { return b.RPM == 0 && b.TPM == 0 && !b.Adaptive }

// MaxBudget is the largest RPM or TPM.
const MaxBudget = 1_000_000_000_000

// String writes b in the form ParseBudget reads: "rpm=3000;tpm=400000;adaptive;per_tenant=50"
// ("" for none).
func (b Budget) String() string {
	var parts []string
	if b.RPM > 0 {
		parts = append(parts, "rpm="+strconv.FormatInt(b.RPM, 10))
	}
	if b.TPM > 0 {
		parts = append(parts, "tpm="+strconv.FormatInt(b.TPM, 10))
	}
	if b.Adaptive {
		parts = append(parts, "adaptive")
	}
	if b.PerTenant > 0 {
		parts = append(parts, "per_tenant="+strconv.FormatInt(b.PerTenant, 10))
	}
	return strings.Join(parts, ";")
}

// ParseBudget reads options in the form "rpm=N;tpm=N;adaptive;per_tenant=N", in any order,
// each at most once: the part of a LEASEHOLD_LIMITS entry after its limit.
func ParseBudget(s string) (Budget, error) {
	var b Budget
	seen := map[string]bool{}
	for opt := range strings.SplitSeq(s, ";") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		name, value, hasValue := strings.Cut(opt, "=")
		name = strings.TrimSpace(name)
		if seen[name] {
			return Budget{}, fmt.Errorf("option %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "adaptive":
			if hasValue {
				return Budget{}, fmt.Errorf("option adaptive takes no value")
			}
			b.Adaptive = true
		case "rpm", "tpm", "per_tenant":
			n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if !hasValue || err != nil || n < 1 || n > MaxBudget {
				return Budget{}, fmt.Errorf("option %s: want %s=N, N from 1 to %d", name, name, int64(MaxBudget))
			}
			switch name {
			case "rpm":
				b.RPM = n
			case "tpm":
				b.TPM = n
			default:
				b.PerTenant = n
			}
		default:
			return Budget{}, fmt.Errorf("unknown option %q: want rpm=N, tpm=N, adaptive or per_tenant=N", name)
		}
	}
	return b, nil
}
