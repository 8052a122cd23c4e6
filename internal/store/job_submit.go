package store

import (
	"github.com/leasehold/leasehold/job"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/internal/parallel"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// Submit validates sub and creates the job for tenant. With an
// idempotency key ("" = none) a repeated request returns the job the first
// one created, with created false. Invalid input returns a
// *ValidationError and writes nothing.
func (s *Store) Submit(ctx context.Context, tenant string, sub job.Submission, idemKey string) (j job.Job, created bool, err error) {
	return s.SubmitWithin(ctx, tenant, sub, idemKey, job.Cap{})
}

// SubmitWithin is Submit under limit, a cap on tenant's jobs not ended: a
// new job that would take the tenant to more than limit.Max is refused
// with a *CapError. A replay of an idempotent request is answered with the
// job it created, whatever the count.
//
// The job's own queue is counted atomically with its creation, so
// concurrent submissions to one queue never pass the cap. The other
// queues live in other Redis Cluster slots: their counts are read in one
// round trip before, so concurrent submissions to different queues may
// pass it by as many as are in flight at once.
func (s *Store) SubmitWithin(ctx context.Context, tenant string, sub job.Submission, idemKey string, limit job.Cap) (j job.Job, created bool, err error) {
	res, err := s.SubmitBatch(ctx, tenant, []job.BatchItem{{Submission: sub, IdempotencyKey: idemKey}}, limit)
	if err != nil {
		return job.Job{}, false, err
	}
	return res[0].Job, res[0].Created, res[0].Err
}

// Replays reports, in one round trip, which of idemKeys ("" = none)
// already have a record for tenant: a submission with one of them may be
// a replay, which creates no job (the API does not charge it the rate).
func (s *Store) Replays(ctx context.Context, tenant string, idemKeys []string) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(idemKeys))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range idemKeys {
			if k != "" {
				cmds[i] = p.Exists(ctx, s.keys.Idempotency(tenant, k))
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("job: read idempotency records: %w", err)
	}
	found := make([]bool, len(idemKeys))
	for i, cmd := range cmds {
		found[i] = cmd != nil && cmd.Val() > 0
	}
	return found, nil
}

// SubmitBatch submits 1 to MaxBatch items for tenant under limit, each as
// its own SubmitWithin would: each item is created, replayed or refused
// on its own (BatchResult.Err), and a refused item writes nothing. It
// does in a few round trips what as many SubmitWithin calls do in one
// each: the rules of every item's keys are read at once, the idempotency
// keys claimed and the tenant's counts read at once, and each queue's
// items are created by runs of the submit script of up to SubmitChunk
// items, queue after queue in the order of their first item. Within a
// queue the items are created in order, each counted against the cap
// after the ones before it; a queue's items count against the cap in the
// queues after it.
//
// An error (Redis failed) with no results means nothing was created. An
// error with results means the batch stopped part-way: every item is
// answered, refused, or has an *UnansweredError (those the failure left
// unanswered), and resending those with their idempotency keys finds
// which were created.
func (s *Store) SubmitBatch(ctx context.Context, tenant string, items []job.BatchItem, limit job.Cap) ([]job.BatchResult, error) {
	return s.SubmitBatchEach(ctx, tenant, items, limit, nil)
}

// SubmitBatchEach is SubmitBatch that calls answered (unless nil) with
// each item that gets a job, created or replayed, and its result, as soon
// as its run of the submit script is answered: on the caller's goroutine,
// while Redis creates the items after it. A caller that shows the jobs
// (the API encodes each) does it meanwhile, not after the last item.
func (s *Store) SubmitBatchEach(ctx context.Context, tenant string, items []job.BatchItem, limit job.Cap,
	answered func(i int, r job.BatchResult)) ([]job.BatchResult, error) {
	if err := job.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if len(items) < 1 || len(items) > job.MaxBatch {
		return nil, &job.ValidationError{Errors: []job.FieldError{{Field: "jobs", Message: fmt.Sprintf("must hold 1 to %d submissions, not %d", job.MaxBatch, len(items))}}}
	}
	b := &batch{s: s, tenant: tenant, limit: limit, out: make([]job.BatchResult, len(items)), answered: answered}
	if err := b.prepare(ctx, items); err != nil {
		return nil, err
	}
	if err := b.claim(ctx); err != nil {
		return nil, err
	}
	if err := b.checkRoom(ctx); err != nil {
		return nil, err
	}
	err := b.create(ctx)
	return b.out, errors.Join(err, b.cleanUp(ctx))
}

// batch is one SubmitBatch on its way.
type batch struct {
	s      *Store
	tenant string
	limit  job.Cap
	out    []job.BatchResult
	live   []*submitting    // the items not refused yet, in order
	counts map[string]int64 // the tenant's jobs not ended per queue (when limit.Max > 0)
	kept   map[string]int64 // the tenant's retained bytes per queue (when limit.MaxBytes > 0)
	// refused are the items refused after their idempotency key was
	// claimed, whose record cleanUp drops.
	refused  []*submitting
	created  map[string]bool                // the ids created by this batch
	answered func(i int, r job.BatchResult) // SubmitBatchEach's (nil: none)
}

// submitting is one item of a batch not refused yet.
type submitting struct {
	at      int            // its index in the batch
	sub     job.Submission // as given
	n       job.Submission // normalized
	idem    string
	rules   *keyRules
	tokens  int64  // its estimated tokens (Submission.Tokens)
	keys    string // its concurrency keys as JSON, as the job stores them
	lane    string // its kind and keys: its lane (fair.lua)
	trace   string // its submit span's traceparent ("" untraced)
	fresh   string // the id this request made up
	id      string // the job's: fresh, or the one its idempotency key stands for
	span    trace.Span
	claimed bool // this batch wrote the idempotency record
}

// replay says whether an earlier request with the item's idempotency key
// made its id: the item is answered with that request's job.
func (p *submitting) replay() bool { return p.id != p.fresh }

// refuse records err as item p's answer. Only an item whose id is its
// own has anything to drop: a replay of a record whose first request is
// still in flight leaves it to that one.
func (b *batch) refuse(p *submitting, err error) {
	b.out[p.at].Err = err
	if p.span != nil {
		endSpan(p.span, err)
		p.span = nil
	}
	if !p.replay() && p.claimed {
		b.refused = append(b.refused, p)
	}
}

// keep keeps the items of b.live that ok keeps, refusing the others with
// the error it returns.
func (b *batch) keep(ok func(p *submitting) error) {
	b.live = slices.DeleteFunc(b.live, func(p *submitting) bool {
		if err := ok(p); err != nil {
			b.refuse(p, err)
			return true
		}
		return false
	})
}

// prepare normalizes and validates every item, on every CPU at once
// (parallel.Each), and checks each against its keys' rules, read once for
// all the items that need them.
func (b *batch) prepare(ctx context.Context, items []job.BatchItem) error {
	prepared := make([]*submitting, len(items))
	parallel.Each(len(items), func(i int) {
		it := items[i]
		p := &submitting{at: i, sub: it.Submission, idem: it.IdempotencyKey}
		var err error
		if p.idem != "" && !validIdempotencyKey(p.idem) {
			err = &job.ValidationError{Errors: []job.FieldError{{
				Field: "Idempotency-Key", Message: "must be 1 to 255 printable ASCII characters"}}}
		} else {
			p.n, err = p.sub.Normalize(b.tenant)
		}
		if err != nil {
			b.out[i].Err = err
			return
		}
		p.tokens = p.n.Tokens()
		keys, _ := json.Marshal(p.n.ConcurrencyKeys) // strings always marshal
		p.keys, p.lane = string(keys), scripts.Lane(p.n.Kind, string(keys))
		prepared[i] = p
	})
	var ruled []string // keys whose rules an item needs
	for _, p := range prepared {
		if p == nil {
			continue
		}
		// Made in order: ids made in one process are, and a batch's jobs
		// list in the order of its items (jobid.New).
		p.fresh = jobid.New(p.n.Queue)
		p.id = p.fresh
		if b.s.needsRules(p.sub, p.n, p.tokens) {
			p.rules = &keyRules{named: b.s.jobs.limited && len(p.sub.ConcurrencyKeys) > 0}
			ruled = append(ruled, p.n.ConcurrencyKeys...)
		}
		b.live = append(b.live, p)
	}
	if len(ruled) > 0 {
		slices.Sort(ruled)
		l, bu, err := b.s.limitsOf(ctx, slices.Compact(ruled))
		if err != nil {
			return err
		}
		for _, p := range b.live {
			if p.rules != nil {
				p.rules.limits, p.rules.budgets = l, bu
			}
		}
	}
	b.keep(func(p *submitting) error { return p.rules.check(b.tenant, p.sub, p.n, p.tokens) })
	return nil
}

// claim claims the items' idempotency keys and, under a cap, reads the
// tenant's counts, in one round trip. SET NX GET decides the winner of
// each key and reads its record in one atomic step: an item that loses
// takes the id the record holds, and the submit script completes a
// winner that crashed before creating its job. Two items of the batch
// with one key are the first request and its replay, in order.
//
// An item already over the cap is refused before anything else is
// written, unless it is a replay.
func (b *batch) claim(ctx context.Context) error {
	s := b.s
	claims := make([]*redis.StatusCmd, len(b.live))
	bodies := make([]string, len(b.live))
	var counts map[string]*redis.SliceCmd
	var kept map[string]*redis.StringCmd
	fields := countedFields(b.tenant)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range b.live {
			if it.idem == "" {
				continue
			}
			body, err := it.n.Hash()
			if err != nil {
				return err
			}
			rec, err := json.Marshal(idempotencyRecord{Job: it.id, Queue: it.n.Queue, Body: body})
			if err != nil {
				return err
			}
			bodies[i] = body
			claims[i] = p.SetArgs(ctx, s.keys.Idempotency(b.tenant, it.idem), rec, redis.SetArgs{Mode: "NX", Get: true, TTL: s.jobs.idemTTL})
		}
		if b.limit.Max > 0 {
			counts = map[string]*redis.SliceCmd{}
			for _, q := range b.capQueues() {
				counts[q] = p.HMGet(ctx, s.keys.QueueStats(q), fields...)
			}
		}
		if b.limit.MaxBytes > 0 {
			kept = s.readRetained(ctx, p, b.tenant, b.capQueues())
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("job: idempotency keys and counts: %w", err)
	}
	if counts != nil {
		b.counts = map[string]int64{}
		for q, cmd := range counts {
			n, err := parseCounts(cmd)
			if err != nil {
				return fmt.Errorf("job: count jobs not ended in %s: %w", q, err)
			}
			b.counts[q] = n[0] + n[1] + n[2] + n[3]
		}
	}
	if kept != nil {
		var err error
		if b.kept, err = retainedOf(kept); err != nil {
			return err
		}
	}
	for i, it := range b.live {
		if claims[i] == nil {
			continue
		}
		old, err := claims[i].Result()
		if errors.Is(err, redis.Nil) {
			it.claimed = true // the first request with this key
			continue
		}
		if err != nil {
			return fmt.Errorf("job: idempotency key: %w", err)
		}
		var prev idempotencyRecord
		if err := json.Unmarshal([]byte(old), &prev); err != nil {
			return fmt.Errorf("job: idempotency record: %w", err)
		}
		it.id = prev.Job
		if prev.Body != bodies[i] {
			it.id = "" // not a replay either: nothing to drop
			b.out[it.at].Err = job.ErrIdempotencyConflict
		}
	}
	b.live = slices.DeleteFunc(b.live, func(p *submitting) bool { return b.out[p.at].Err != nil })
	if b.limit.Max > 0 {
		b.keep(func(p *submitting) error {
			if n := b.counts[p.n.Queue] + b.elsewhere(p.n.Queue, b.counts); n >= b.limit.Max && !p.replay() {
				return &job.CapError{Jobs: n, Max: b.limit.Max}
			}
			return nil
		})
	}
	return nil
}

// capQueues are the queues whose counts the cap reads: its own, and each
// item's.
func (b *batch) capQueues() []string {
	qs := slices.Clone(b.limit.Queues)
	for _, p := range b.live {
		qs = append(qs, p.n.Queue)
	}
	slices.Sort(qs)
	return slices.Compact(qs)
}

// elsewhere is what counts (b.counts or b.kept) holds for the cap's
// queues other than q: as read, plus what this batch has created since.
func (b *batch) elsewhere(q string, counts map[string]int64) int64 {
	var n int64
	for _, other := range slices.Compact(slices.Sorted(slices.Values(b.limit.Queues))) {
		if other != q {
			n += counts[other]
		}
	}
	return n
}

// checkRoom refuses the new items with on_busy "reject" whose keys have no
// room now. A replay returns the job its first request created, room or
// not.
func (b *batch) checkRoom(ctx context.Context) error {
	var err error
	b.keep(func(p *submitting) error {
		if err != nil || p.n.OnBusy != job.OnBusyReject || p.replay() {
			return nil
		}
		var busy *job.BusyError
		rerr := b.s.room(ctx, p.rules, p.n.ConcurrencyKeys, p.tokens)
		if errors.As(rerr, &busy) {
			return rerr
		}
		err = rerr
		return nil
	})
	return err
}

// create names the queues in the set of queues, then runs the submit
// script on the items of each queue (createIn), one queue after another;
// under a cap, on each run of consecutive items of one queue instead, so
// that each item is counted after every item before it, in whichever
// queue.
func (b *batch) create(ctx context.Context) error {
	if len(b.live) == 0 {
		return nil
	}
	s := b.s
	var queues []string
	var groups [][]*submitting
	for _, p := range b.live {
		k := slices.Index(queues, p.n.Queue)
		switch {
		case k < 0:
			queues = append(queues, p.n.Queue)
			groups = append(groups, []*submitting{p})
		case b.limit.Counts() && p.n.Queue != groups[len(groups)-1][0].n.Queue:
			groups = append(groups, []*submitting{p})
		case b.limit.Counts():
			groups[len(groups)-1] = append(groups[len(groups)-1], p)
		default:
			groups[k] = append(groups[k], p)
		}
		_, p.span = s.startSubmit(ctx, b.tenant, p.n.Queue, p.id)
		p.trace = telemetry.Encode(p.span.SpanContext())
	}
	if err := s.jobs.queueSet.add(ctx, queues); err != nil {
		b.unanswered(b.live, err)
		return err
	}
	b.created = map[string]bool{}
	for i, g := range groups {
		if err := b.createIn(ctx, g); err != nil {
			b.unanswered(b.live, err)
			return err
		}
		if b.kept != nil && i < len(groups)-1 {
			// The script alone knows the bytes it charged: the queues
			// after this one count them as read again.
			if err := b.reread(ctx, g[0].n.Queue); err != nil {
				b.unanswered(b.live, err)
				return err
			}
		}
	}
	return nil
}

// createIn runs the submit script for items, all of one queue, in chunks,
// one after another, and answers them: while Redis runs a chunk, this
// goroutine answers the one before it (and the caller shows its jobs:
// SubmitBatchEach), and another lays out the one after, so that Go's work
// on a batch is done beside Redis's, not before and after it. Every chunk
// gets the same room: the script counts the jobs the chunks before it
// created, which are the queue's by then. A chunk is sent once the one
// before it is answered, so they run in order, each by its hash like
// every script: a NOSCRIPT (a restart or failover lost the script) is
// run again with EVAL before the next chunk goes. A chunk that fails
// does not stop those after it: each is answered.
func (b *batch) createIn(ctx context.Context, in []*submitting) error {
	s, q := b.s, in[0].n.Queue
	room := "" // how many of the tenant's jobs not ended q may hold; "" = no cap
	if b.limit.Max > 0 {
		room = strconv.FormatInt(b.limit.Max-b.elsewhere(q, b.counts), 10)
	}
	quota := "" // how many bytes the tenant's jobs in q may be charged; "" = no quota
	if b.limit.MaxBytes > 0 {
		quota = strconv.FormatInt(b.limit.MaxBytes-b.elsewhere(q, b.kept), 10)
	}
	var calls []submitCall
	at := time.Now() // the usage day the jobs count in
	for chunk := range slices.Chunk(in, job.SubmitChunk) {
		calls = append(calls, submitCall{tenant: b.tenant, queue: q, room: room, quota: quota, at: at, usageTTL: s.jobs.usageTTL, items: chunk})
	}
	if len(calls) == 1 { // every single submit: nothing to overlap
		return b.answer(calls[0], s.run(ctx, jobSubmitScript, calls[0]))
	}
	laid := make(chan scripts.Args, len(calls))
	go func() {
		for _, c := range calls {
			laid <- c.layout(s.keys)
		}
	}()
	replies := make(chan *redis.Cmd, len(calls))
	go func() {
		for range calls {
			a := <-laid
			replies <- s.runArgs(ctx, jobSubmitScript, a)
		}
	}()
	var errs []error
	for _, c := range calls {
		errs = append(errs, b.answer(c, <-replies))
	}
	return errors.Join(errs...)
}

// answer reads the submit script's reply to c.
func (b *batch) answer(c submitCall, cmd *redis.Cmd) error {
	q, items := c.queue, c.items
	res, err := cmd.Slice()
	if err == nil && len(res) != 2*len(items) {
		err = fmt.Errorf("%d values in the reply, want %d", len(res), 2*len(items))
	}
	if err != nil {
		err = fmt.Errorf("job: submit %d jobs to %s: %w", len(items), q, err)
		b.unanswered(items, err)
		return err
	}
	for i, p := range items {
		status, reply := res[2*i], res[2*i+1]
		switch status {
		case int64(-1):
			own, _ := reply.(int64)
			b.refuse(p, &job.CapError{Jobs: b.elsewhere(q, b.counts) + own, Max: b.limit.Max})
			continue
		case int64(-3):
			own, _ := reply.(int64)
			b.refuse(p, &job.QuotaError{Bytes: b.elsewhere(q, b.kept) + own, Max: b.limit.MaxBytes})
			continue
		case int64(-2):
			b.out[p.at].Err = job.ErrDeleted
			endSpan(p.span, job.ErrDeleted)
			p.span = nil
			continue
		}
		var j job.Job
		if at, ok := reply.(string); ok { // created by this run
			j, err = c.created(p, at)
		} else {
			j, err = parseReply(c.queue, p.id, reply)
		}
		if err != nil {
			b.unanswered(items, err)
			return err
		}
		b.out[p.at].Job, b.out[p.at].Created = j, status == int64(1)
		endSpan(p.span, nil)
		p.span = nil
		if b.answered != nil {
			b.answered(p.at, b.out[p.at])
		}
		if b.out[p.at].Created {
			b.created[p.id] = true
			if b.counts != nil {
				b.counts[q]++
			}
		}
	}
	return nil
}

// unanswered answers each of items not answered yet with err, the
// failure that left it unknown whether it was created, and ends its span.
// Its idempotency record stays (cleanUp drops only the refused items'):
// it stands for a job that may exist.
func (b *batch) unanswered(items []*submitting, err error) {
	lost := &job.UnansweredError{Err: err}
	for _, p := range items {
		r := &b.out[p.at]
		if r.Err != nil || r.Job.ID != "" {
			continue
		}
		r.Err = lost
		if p.span != nil {
			endSpan(p.span, err)
			p.span = nil
		}
	}
}

// cleanUp drops the idempotency records that the items refused had
// written, in one round trip: a refusal leaves nothing behind, and a
// retry with the same key is a new request. An id that another item of
// the batch created (its replay) keeps its record.
func (b *batch) cleanUp(ctx context.Context) error {
	s := b.s
	var dels []string
	for _, p := range b.refused {
		if b.created[p.id] {
			continue
		}
		if p.claimed {
			dels = append(dels, s.keys.Idempotency(b.tenant, p.idem))
		}
	}
	if len(dels) == 0 {
		return nil
	}
	// One DEL per key: on a Cluster they live in slots of their own.
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range dels {
			p.Del(ctx, k)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("job: submit: drop the idempotency records of refused jobs: %w", err)
	}
	return nil
}

// anys converts strings for a variadic command.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// cost is a job's estimated tokens as the job hash keeps them: "" for none.
func cost(tokens int64) string {
	if tokens == 0 {
		return ""
	}
	return strconv.FormatInt(tokens, 10)
}

// unended returns how many of tenant's jobs have not ended in each of
// queues, in one round trip: what a cap on them counts (see SubmitWithin).
func (s *Store) unended(ctx context.Context, tenant string, queues []string) (map[string]int64, error) {
	fields := countedFields(tenant)
	cmds := map[string]*redis.SliceCmd{}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, q := range queues {
			if cmds[q] == nil {
				cmds[q] = p.HMGet(ctx, s.keys.QueueStats(q), fields...)
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("job: count jobs not ended: %w", err)
	}
	counts := make(map[string]int64, len(cmds))
	for q, cmd := range cmds {
		n, err := parseCounts(cmd)
		if err != nil {
			return nil, fmt.Errorf("job: count jobs not ended in %s: %w", q, err)
		}
		counts[q] = n[0] + n[1] + n[2] + n[3]
	}
	return counts, nil
}

// keyRules are the limits and budgets of a submission's keys, read once for
// the checks that need them: which keys a tenant may name, a cost larger
// than a whole budget, and on_busy "reject".
type keyRules struct {
	limits  map[string]int64
	budgets map[string]job.Budget
	named   bool // check the keys the submitter named (Config.OnlyLimitedKeys)
}

// Check refuses what Submit would refuse of sub for tenant before it
// writes anything: sub's validity and its keys' rules (a schedule's job is
// checked when the schedule is created, not at its first fire). It writes
// nothing, and cannot know what only the moment of a submit decides: room
// under the tenant's cap and the rate.
func (s *Store) Check(ctx context.Context, tenant string, sub job.Submission) error {
	n, err := sub.Normalize(tenant)
	if err != nil {
		return err
	}
	tokens := n.Tokens()
	if !s.needsRules(sub, n, tokens) {
		return nil
	}
	r := &keyRules{named: s.jobs.limited && len(sub.ConcurrencyKeys) > 0}
	if r.limits, r.budgets, err = s.limitsOf(ctx, n.ConcurrencyKeys); err != nil {
		return err
	}
	return r.check(tenant, sub, n, tokens)
}

// needsRules says whether a check needs the rules of n's keys: a key of
// the submitter's choice to check, an estimate to hold against a tpm, or
// a job rejected when busy.
func (s *Store) needsRules(sub, n job.Submission, tokens int64) bool {
	return s.jobs.limited && len(sub.ConcurrencyKeys) > 0 || tokens > 0 || n.OnBusy == job.OnBusyReject
}

// check refuses what the keys' rules do not allow. A tenant may name a key
// that has a limit or a budget (exact or by its prefix's wildcard), or a
// key under its own prefix tenant:<tenant>:; the keys added for it
// (tenant:<tenant>, model:<model> for llm.chat) always. Any other key would
// let a tenant hold slots nobody limits, or fill Redis with keys nobody
// configured. An estimate (tokens) larger than a key's whole tpm could
// never run: it would reserve the key's whole minute for one job.
func (r *keyRules) check(tenant string, sub, n job.Submission, tokens int64) error {
	if r == nil {
		return nil
	}
	var v job.ValidationError
	own := "tenant:" + tenant
	model, _ := job.ChatModel(n)
	for i, k := range sub.ConcurrencyKeys {
		if !r.named {
			break
		}
		_, limited := scripts.Lookup(r.limits, k)
		_, budgeted := scripts.Lookup(r.budgets, k)
		if !limited && !budgeted && k != own && !strings.HasPrefix(k, own+":") && k != "model:"+model {
			v.Add(fmt.Sprintf("concurrency_keys[%d]", i), "%s has no limit or budget: name a key that has one, or one under %s:", k, own)
		}
	}
	field := "input.max_tokens" // llm.chat's estimate, from its prompt and max_tokens
	if sub.Cost != nil {
		field = "cost.tokens"
	}
	for _, k := range n.ConcurrencyKeys {
		b, ok := scripts.Lookup(r.budgets, k)
		switch share := b.Share(scripts.LimitOf(r.limits, k)); {
		case ok && b.TPM > 0 && tokens > b.TPM:
			v.Add(field, "the job's estimate, %d tokens, is more than the whole tpm of %s (%d): the job could never run", tokens, k, b.TPM)
		case share.TPM > 0 && tokens > share.TPM:
			v.Add(field, "the job's estimate, %d tokens, is more than a tenant's share of the tpm of %s (%d): the job could never run", tokens, k, share.TPM)
		}
	}
	return v.Err()
}

// room returns a *BusyError when one of keys has no room now (on_busy
// "reject"): its limit (an adaptive key's effective limit) is full, or its
// budget has no room for the job's tokens, or the upstream throttled it.
// It only looks: each key's lease set is in a slot of its own, and room now
// may be gone before a worker claims.
func (s *Store) room(ctx context.Context, r *keyRules, keys []string, tokens int64) error {
	for _, k := range keys {
		l := scripts.LimitOf(r.limits, k)
		b, budgeted := scripts.Lookup(r.budgets, k)
		label := scripts.Label(r.limits, r.budgets, k)
		if budgeted {
			var reading BudgetReading
			if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				reading = s.BudgetIn(ctx, p, k)
				return nil
			}); err != nil {
				return fmt.Errorf("job: room in %s: %w", k, err)
			}
			st, err := reading.State()
			if err != nil {
				return fmt.Errorf("job: room in %s: %w", k, err)
			}
			var limit job.Optional
			if l >= 0 {
				limit = job.Some(l)
			}
			switch {
			case !st.ThrottledUntil.IsZero():
				return &job.BusyError{Key: k, Label: label, RetryAfter: time.Until(st.ThrottledUntil)}
			case b.RPM > 0 && st.Requests >= b.RPM, b.TPM > 0 && st.Tokens+min(tokens, b.TPM) > b.TPM:
				return &job.BusyError{Key: k, Label: label, RetryAfter: time.Second}
			case b.Adaptive:
				l = effectiveLimit(st.Effective, limit)
			}
		}
		if l < 0 {
			continue
		}
		ok, wait, err := s.LeaseRoom(ctx, k, int(l))
		if err != nil {
			return fmt.Errorf("job: room in %s: %w", k, err)
		}
		if !ok {
			return &job.BusyError{Key: k, Label: label, RetryAfter: wait}
		}
	}
	return nil
}

// flag is a script's boolean argument: "1" or "".
func flag(b bool) string {
	if b {
		return "1"
	}
	return ""
}
