package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/store/scripts"
)

var usageAddScript = scripts.Load("ratelimit_usage_add.lua")

// UsageCount is events to count once each, n each, in a tenant's counter.
type UsageCount struct {
	Tenant, Counter string
	N               int64
	Events          []UsageEvent
}

// UsageEvent is one event a UsageCount counts: its id and when it
// happened, which picks its UTC day.
type UsageEvent struct {
	ID string
	At time.Time
}

// UsageMark is what counting one event found.
type UsageMark struct {
	// Added says the event was counted now.
	Added bool
	// Expired says its day's counts are dropped already (past retention):
	// it was not counted.
	Expired bool
	// Was is, for an event counted before (neither Added nor Expired), the
	// n it was counted with, as a decimal string.
	Was string
}

// UsageRetention is how long usage marks and counts are kept.
type UsageRetention struct {
	// MarkTTL is how long an event's mark lives after its last write: a
	// retry later than that is counted again.
	MarkTTL time.Duration
	// Days is how long a day's counts are kept after the day ends.
	Days time.Duration
}

// CountUsage counts each of counts, each event once per counter: a mark
// of the event (of its UTC day or of the days either side) and the
// increment are one script, so a retried count adds nothing. Counts of one
// tenant, counter and n are one script, all of them in one round trip (a
// pipeline, split per node on a Cluster). It returns, for each count, a
// mark per event, or the error that kept it from Redis.
func (s *Store) CountUsage(ctx context.Context, r UsageRetention, counts []UsageCount) ([][]UsageMark, []error) {
	type script struct {
		UsageCount
		of  []int // the indexes in counts of its parts, in order
		run *scripts.Queued
	}
	type name struct {
		tenant, counter string
		n               int64
	}
	var runs []*script
	byName := map[name]*script{}
	for i, c := range counts {
		if len(c.Events) == 0 {
			continue
		}
		k := name{c.Tenant, c.Counter, c.N}
		sc := byName[k]
		if sc == nil {
			sc = &script{UsageCount: UsageCount{Tenant: c.Tenant, Counter: c.Counter, N: c.N}}
			byName[k], runs = sc, append(runs, sc)
		}
		sc.Events, sc.of = append(sc.Events, c.Events...), append(sc.of, i)
	}
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sc := range runs {
			sc.run = usageAddScript.In(ctx, p, s.rdb, s.usageAddArgs(r, sc.UsageCount))
		}
		return nil
	})
	marks, errs := make([][]UsageMark, len(counts)), make([]error, len(counts))
	for _, sc := range runs {
		res, err := sc.run.Reply(ctx).Slice()
		if err == nil && len(res) != 2*len(sc.Events) {
			err = fmt.Errorf("%d values in the reply, want %d", len(res), 2*len(sc.Events))
		}
		for _, i := range sc.of {
			c := counts[i]
			if err != nil {
				errs[i] = fmt.Errorf("store: count usage %s/%s %q: %w", c.Tenant, c.Counter, c.Events[0].ID, err)
				continue
			}
			marks[i] = make([]UsageMark, len(c.Events))
			for j := range c.Events {
				switch res[2*j] {
				case int64(1):
					marks[i][j].Added = true
				case int64(0):
					marks[i][j].Was, _ = res[2*j+1].(string)
				default:
					marks[i][j].Expired = true
				}
			}
			res = res[2*len(c.Events):]
		}
	}
	return marks, errs
}

// usageAddArgs returns the keys and arguments of c's script.
func (s *Store) usageAddArgs(r UsageRetention, c UsageCount) scripts.Args {
	tenant, counter, n, events := c.Tenant, c.Counter, c.N, c.Events
	keys := make([]string, 0, 4*len(events))
	args := append(make([]any, 0, 3+3*len(events)), counter, n, r.MarkTTL.Milliseconds())
	for _, e := range events {
		day := utcDay(e.At)
		keys = append(keys, s.keys.UsageSeen(tenant, day), s.keys.UsageSeen(tenant, day.AddDate(0, 0, -1)),
			s.keys.UsageSeen(tenant, day.AddDate(0, 0, 1)), s.keys.UsageDay(tenant, day))
		args = append(args, e.ID, usageMark(counter, e.ID), day.Add(24*time.Hour).Add(r.Days).UnixMilli())
	}
	return scripts.Args{Keys: keys, Argv: args}
}

// usageMarkLen is the bytes of a mark: 96 bits. Two events of a tenant
// collide when their marks are equal, and the second is then taken as
// counted already. A new event is looked up among the marks of three
// days: at 10^7 events a tenant-day, 3·10^7 marks, the chance that any of
// a day's 10^7 events collides is about 10^7 · 3·10^7 / 2^96 ≈ 4·10^-15.
// In a Redis hash a field of up to 14 bytes costs what one of 8 does (a
// 16-byte allocation): 56 bytes a mark in all, where "<counter>:<event
// id>" cost 104 (Redis 7.0).
const usageMarkLen = 12

// usageMark is the field that marks eventID counted in counter: the first
// usageMarkLen bytes of the SHA-256 of "<counter>:<event id>", the field
// of the versions before it (still looked up: ratelimit_usage_add.lua).
func usageMark(counter, eventID string) string {
	sum := sha256.Sum256([]byte(counter + ":" + eventID))
	return string(sum[:usageMarkLen])
}

// UsageDays returns tenant's counts for the n UTC days from the day of
// first, in order, in one round trip: a tenant's days share one slot.
func (s *Store) UsageDays(ctx context.Context, tenant string, first time.Time, n int) ([]UsageDay, error) {
	first = utcDay(first)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, n)
	for i := range cmds {
		cmds[i] = pipe.HGetAll(ctx, s.keys.UsageDay(tenant, first.AddDate(0, 0, i)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("store: usage of %s: %w", tenant, err)
	}
	days := make([]UsageDay, n)
	for i, cmd := range cmds {
		days[i] = UsageDay{Date: first.AddDate(0, 0, i), Counts: make(map[string]int64, len(cmd.Val()))}
		for counter, v := range cmd.Val() {
			count, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("store: usage of %s: %s/%s holds %q: %w", tenant, days[i].Date.Format(time.DateOnly), counter, v, err)
			}
			days[i].Counts[counter] = count
		}
	}
	return days, nil
}

// utcDay is midnight UTC of t's UTC date.
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
