package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/jobid"
	"github.com/leasehold/leasehold/internal/store/scripts"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit/usage"
)

// Validate refuses job settings that contradict each other, and takes
// the defaults.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []store.Config{
		{Retention: -time.Second},
		{IdempotencyTTL: -time.Second},
		{UsageRetention: -time.Second},
		{Retention: time.Hour}, // shorter than the default idempotency TTL
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", cfg)
		}
	}
	if err := (store.Config{}).Validate(); err != nil {
		t.Errorf("Validate of the defaults: %v", err)
	}
}

func TestSubmitGetRoundTrip(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		before := time.Now().Add(-time.Second)
		sub := job.Submission{
			Kind:            "llm.chat",
			Queue:           "gpu",
			Input:           json.RawMessage(`{ "model": "gpt-4o", "messages": [{"role":"user","content":"<hi>"}] }`),
			ConcurrencyKeys: []string{"model:gpt-4o", "tenant:acme", "model:gpt-4o"},
			Priority:        7,
			MaxAttempts:     5,
			Timeout:         dur(90 * time.Second),
			MaxWait:         dur(5 * time.Minute),
			OnBusy:          job.OnBusyReject,
			Metadata:        json.RawMessage(`{"z":1, "conversation":"c-1"}`),
		}
		j, created, err := fx.store.Submit(ctx, "acme", sub, "")
		if err != nil || !created {
			t.Fatalf("Submit = %v, %v", created, err)
		}
		if tag, tagged, _, ok := jobid.Parse(j.ID); !ok || !tagged || tag != jobid.Tag("gpu") {
			t.Errorf("id %q is not tagged with its queue's tag", j.ID)
		}
		got, err := fx.store.Get(ctx, "acme", j.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("created_at %v, not now", got.CreatedAt)
		}
		want := job.Job{
			ID: j.ID, Tenant: "acme", Queue: "gpu", Kind: "llm.chat", State: job.StateQueued,
			Attempt: 0, MaxAttempts: 5, Priority: 7,
			ConcurrencyKeys: []string{"model:gpt-4o", "tenant:acme"},
			CreatedAt:       got.CreatedAt,
			Metadata:        json.RawMessage(`{"conversation":"c-1","z":1}`),
			// A 6-byte prompt: 2 tokens, 4 for its message, and the default max_tokens.
			Cost:    &job.Cost{Tokens: 2 + 4 + job.DefaultMaxTokens},
			Input:   json.RawMessage(`{"messages":[{"content":"<hi>","role":"user"}],"model":"gpt-4o"}`),
			Timeout: 90 * time.Second, MaxWait: 5 * time.Minute, OnBusy: job.OnBusyReject,
		}
		if diff := jobDiff(got, want); diff != "" {
			t.Errorf("Get: %s", diff)
		}
		if diff := jobDiff(j, want); diff != "" {
			t.Errorf("Submit: %s", diff)
		}

		// The record holds the fields of the layout the execution package
		// relies on that have a value other than their usual one: a field
		// without one is left out.
		h := fx.rdb.HGetAll(ctx, fx.keys.Job("gpu", j.ID)).Val()
		for field, v := range map[string]string{
			"timeout_ms": "90000", "max_wait_ms": "300000", "priority": "7", "on_busy": "reject",
			"concurrency_keys": `["model:gpt-4o","tenant:acme"]`,
			"created_at":       strconv.FormatInt(got.CreatedAt.UnixMilli(), 10), "cost": "1030",
		} {
			if got, ok := h[field]; !ok || got != v {
				t.Errorf("field %s = %q (present %v), want %q", field, got, ok, v)
			}
		}
		// A token is read only with its execution, and only an item with
		// an idempotency key needs a nonce; attempt 0, cancel_requested 0
		// and started_at "" are every new job's (scripts.Implied), and its
		// key names its id and queue.
		for _, field := range []string{"result", "error", "finished_at", "exec_id", "exec_state", "trace", "exec_trace", "schedule", "webhook",
			"token", "nonce", "attempt", "cancel_requested", "started_at", "id", "queue"} {
			if v, ok := h[field]; ok {
				t.Errorf("field %s = %q: a field without a value, or with its usual one, is left out", field, v)
			}
		}
		if len(h) != 14 {
			t.Errorf("record has %d fields, want 14: %v", len(h), h)
		}
		// A job of the usual priority, max_wait and on_busy has none of the
		// three either, and reads as before, and a cancel finds it.
		plain, _, err := fx.store.Submit(ctx, "acme", job.Submission{Kind: "echo", Queue: "gpu"}, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"priority", "max_wait_ms", "on_busy"} {
			if v, err := fx.rdb.HGet(ctx, fx.keys.Job("gpu", plain.ID), field).Result(); err == nil {
				t.Errorf("field %s = %q: its usual value is left out", field, v)
			}
		}
		if got, err := fx.store.Get(ctx, "acme", plain.ID, false); err != nil || got.ID != plain.ID || got.Queue != "gpu" ||
			got.Priority != 0 || got.MaxWait != 0 || got.OnBusy != job.OnBusyQueue || got.Attempt != 0 ||
			got.CancelRequested || got.StartedAt != nil {
			t.Errorf("Get of a job of usual values = %+v, %v", got, err)
		}
		if got, err := fx.store.Cancel(ctx, "acme", plain.ID, false); err != nil || got.State != job.StateCancelled || got.ID != plain.ID {
			t.Errorf("Cancel of a job of usual values = %+v, %v", got, err)
		}
		// Its state event is in its hash (states), as a record without its
		// data (the submit's, the same for every job): it has no stream yet.
		if evs := fx.events(t, j.ID); len(evs) != 1 || h["states"] != evs[0].ID+" \n" || string(evs[0].Data) != scripts.SubmittedStateData {
			t.Errorf("states %q, events %+v: want its queued event, recorded without its data", h["states"], evs)
		}
		if n := fx.rdb.Exists(ctx, fx.keys.JobEvents("gpu", j.ID)).Val(); n != 0 {
			t.Error("a job that never streamed has a stream")
		}
		if n := fx.rdb.Exists(ctx, fx.keys.JobQueue(j.ID)).Val(); n != 0 {
			t.Error("a tagged id has a lookup key")
		}
		if !fx.rdb.SIsMember(ctx, fx.keys.Queues(), "gpu").Val() {
			t.Error("queue not registered")
		}
		if fx.rdb.PTTL(ctx, fx.keys.Job("gpu", j.ID)).Val() != -1 {
			t.Error("a queued job has a TTL")
		}
	})
}

// jobDiff describes how two jobs differ, comparing their JSON and the fields
// JSON does not show.
func jobDiff(got, want job.Job) string {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		return fmt.Sprintf("\n got %s\nwant %s", g, w)
	}
	if string(got.Input) != string(want.Input) || got.Timeout != want.Timeout ||
		got.MaxWait != want.MaxWait || got.OnBusy != want.OnBusy {
		return fmt.Sprintf("options: got %s %v %v %s, want %s %v %v %s", got.Input, got.Timeout,
			got.MaxWait, got.OnBusy, want.Input, want.Timeout, want.MaxWait, want.OnBusy)
	}
	return ""
}

func TestSubmitDefaults(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		j := fx.submit(t, "acme", job.Submission{Kind: "echo", Input: json.RawMessage("null"), Timeout: dur(time.Nanosecond)})
		if j.Queue != job.DefaultQueue || j.MaxAttempts != 3 || j.OnBusy != job.OnBusyQueue ||
			j.MaxWait != 0 || string(j.Input) != "{}" || j.Metadata != nil ||
			!slices.Equal(j.ConcurrencyKeys, []string{"tenant:acme"}) {
			t.Errorf("defaults not applied: %+v", j)
		}
		// A positive duration never rounds down to zero (which would mean "none").
		if j.Timeout != time.Millisecond {
			t.Errorf("timeout 1ns stored as %v, want 1ms", j.Timeout)
		}
		j = fx.submit(t, "acme", job.Submission{Kind: "echo"})
		if j.Timeout != 10*time.Minute {
			t.Errorf("default timeout %v", j.Timeout)
		}
	})
}

func TestReadyOrderIsPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		priorities := []int{0, 5, 0, -3, 5, 100, -100, 0}
		ids, created := make([]string, len(priorities)), make([]int64, len(priorities))
		for i, p := range priorities {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo", Priority: p})
			ids[i], created[i] = j.ID, j.CreatedAt.UnixMilli()
		}
		// In their lane, highest priority first and equal priorities in
		// submission order; the ready set holds the lane at its virtual
		// start, with no priority band above it.
		want := []string{ids[5], ids[1], ids[4], ids[0], ids[2], ids[7], ids[3], ids[6]}
		lanes := fx.rdb.ZRangeWithScores(t.Context(), fx.keys.QueueReady(job.DefaultQueue), 0, -1).Val()
		if len(lanes) != 1 || lanes[0].Member != `echo["tenant:acme"]` || int64(lanes[0].Score)>>43 != 0 {
			t.Errorf("ready holds %v, want the one lane scored by its virtual start alone", lanes)
		}
		zs := fx.rdb.ZRangeWithScores(t.Context(), fx.keys.QueueLane(job.DefaultQueue, `echo["tenant:acme"]`), 0, -1).Val()
		var got []string
		for _, z := range zs {
			got = append(got, z.Member.(string))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ready order\n got %v\nwant %v", got, want)
		}
		// The score is exact: (100 - priority) * 2^43 + when the job joined
		// its lane, its creation (Redis ms).
		for _, z := range zs {
			i := slices.Index(ids, z.Member.(string))
			score := int64(z.Score)
			if float64(score) != z.Score || score>>43 != int64(100-priorities[i]) || score&(1<<43-1) != created[i] {
				t.Errorf("job %d (priority %d): score %.0f", i, priorities[i], z.Score)
			}
		}
	})
}

func TestDelayedJobIsScheduled(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		q := job.DefaultQueue
		delayed := fx.submit(t, "acme", job.Submission{Kind: "echo", Delay: dur(90 * time.Second), MaxWait: dur(time.Minute)})
		waiting := fx.submit(t, "acme", job.Submission{Kind: "echo", MaxWait: dur(time.Minute)})
		created := func(j job.Job) float64 { return float64(j.CreatedAt.UnixMilli()) }

		if s, err := fx.rdb.ZScore(ctx, fx.keys.QueueScheduled(q), delayed.ID).Result(); err != nil || s != created(delayed)+90_000 {
			t.Errorf("scheduled score %.0f, %v; want created_at + 90000 = %.0f", s, err, created(delayed)+90_000)
		}
		if err := fx.rdb.ZScore(ctx, fx.keys.QueueReady(q), delayed.ID).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("delayed job in ready: %v", err)
		}
		// max_wait counts from when the job may first run.
		if s := fx.rdb.ZScore(ctx, fx.keys.QueueDeadlines(q), delayed.ID).Val(); s != created(delayed)+150_000 {
			t.Errorf("deadline of the delayed job %.0f, want created_at + 150000", s)
		}
		if s := fx.rdb.ZScore(ctx, fx.keys.QueueDeadlines(q), waiting.ID).Val(); s != created(waiting)+60_000 {
			t.Errorf("deadline %.0f, want created_at + 60000", s)
		}
		if n := fx.rdb.ZCard(ctx, fx.keys.QueueDeadlines(q)).Val(); n != 2 {
			t.Errorf("%d deadlines, want 2", n)
		}
		fx.submit(t, "acme", job.Submission{Kind: "echo"})
		if n := fx.rdb.ZCard(ctx, fx.keys.QueueDeadlines(q)).Val(); n != 2 {
			t.Errorf("a job without max_wait got a deadline")
		}
		if got := fx.stats(t, q); got["queued/acme"] != "3" || len(got) != 1 {
			t.Errorf("stats %v", got)
		}
	})
}

func TestIdempotentSubmit(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		first, created, err := fx.store.Submit(ctx, "acme", job.Submission{
			Kind: "echo", Input: json.RawMessage(`{"a":1,"b":[1,2]}`), ConcurrencyKeys: []string{"m:x"},
		}, "key-1")
		if err != nil || !created {
			t.Fatalf("first: %v, %v", created, err)
		}
		// The same request, spelled differently: key order, white space,
		// defaults written out, the tenant's own key named.
		again, created, err := fx.store.Submit(ctx, "acme", job.Submission{
			Kind: "echo", Queue: "default", MaxAttempts: 3, Timeout: dur(10 * time.Minute), OnBusy: job.OnBusyQueue,
			Input: json.RawMessage("{ \"b\": [1, 2],\n \"a\": 1 }"), ConcurrencyKeys: []string{"tenant:acme", "m:x"},
		}, "key-1")
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("same body: id %s created %v err %v; want %s, false, nil", again.ID, created, err, first.ID)
		}
		_, _, err = fx.store.Submit(ctx, "acme", job.Submission{Kind: "echo", Input: json.RawMessage(`{"a":2}`)}, "key-1")
		if !errors.Is(err, job.ErrIdempotencyConflict) {
			t.Fatalf("different body: %v, want ErrIdempotencyConflict", err)
		}
		// Keys are scoped to the tenant.
		other, created, err := fx.store.Submit(ctx, "globex", job.Submission{Kind: "echo"}, "key-1")
		if err != nil || !created || other.ID == first.ID {
			t.Fatalf("other tenant: %v, %v", created, err)
		}
		for _, tenant := range []string{"acme", "globex"} {
			if n := fx.rdb.ZCard(ctx, fx.keys.QueueTenantJobs(job.DefaultQueue, tenant)).Val(); n != 1 {
				t.Errorf("%s: %d jobs, want 1", tenant, n)
			}
		}
		if ttl := fx.rdb.TTL(ctx, fx.keys.Idempotency("acme", "key-1")).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
			t.Errorf("idempotency record TTL %v, want 24h", ttl)
		}
	})
}

func TestConcurrentSubmitsWithOneKeyCreateOneJob(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		const n = 50
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			ids     = map[string]int{}
			created int
		)
		for range n {
			wg.Go(func() {
				j, c, err := fx.store.Submit(ctx, "acme", job.Submission{Kind: "echo", Input: json.RawMessage(`{"n":1}`)}, "same")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				ids[j.ID]++
				if c {
					created++
				}
			})
		}
		wg.Wait()
		if len(ids) != 1 || created != 1 {
			t.Fatalf("%d ids %v, %d created; want one job, created once", len(ids), ids, created)
		}
		q := job.DefaultQueue
		for name, key := range map[string]string{
			"ready": fx.keys.QueueReady(q), "tenant index": fx.keys.QueueTenantJobs(q, "acme"),
		} {
			if c := fx.rdb.ZCard(ctx, key).Val(); c != 1 {
				t.Errorf("%s holds %d entries, want 1", name, c)
			}
		}
		if got := fx.stats(t, q); got["queued/acme"] != "1" || len(got) != 1 {
			t.Errorf("stats %v", got)
		}
		for id := range ids {
			if c := len(fx.events(t, id)); c != 1 {
				t.Errorf("%d events, want 1", c)
			}
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		if _, err := fx.store.Get(ctx, "globex", j.ID, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("other tenant's Get: %v", err)
		}
		if _, err := fx.store.Cancel(ctx, "globex", j.ID, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("other tenant's Cancel: %v", err)
		}
		if _, err := fx.store.Cancel(ctx, "", j.ID, false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Cancel by the empty tenant: %v", err)
		}
		if _, err := fx.store.Events(ctx, "globex", j.ID, false, "", 0); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("other tenant's Events: %v", err)
		}
		if jobs, _, err := fx.store.List(ctx, job.ListQuery{Tenant: "globex"}); err != nil || len(jobs) != 0 {
			t.Errorf("other tenant's List: %v, %v", jobs, err)
		}
		if got, err := fx.store.Get(ctx, "acme", j.ID, false); err != nil || got.State != job.StateQueued {
			t.Errorf("job changed by another tenant: %+v, %v", got, err)
		}
		if got, err := fx.store.Get(ctx, "admin", j.ID, true); err != nil || got.ID != j.ID {
			t.Errorf("admin Get: %v", err)
		}
		if _, err := fx.store.Get(ctx, "acme", uuid.Must(uuid.NewV7()).String(), false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("unknown id: %v", err)
		}
	})
}

func TestMalformedIDNeverReachesRedis(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: any Redis call would fail with a
	// connection error, not ErrNotFound.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := store.New(rdb, store.Config{})
	id := uuid.Must(uuid.NewV7()).String()
	for _, bad := range []string{"", "x", "{" + id + "}", "urn:uuid:" + id, id + "}", "01J0000000",
		"00000000000000000000000000000000", string([]byte{0xff})} {
		if _, err := s.Get(t.Context(), "acme", bad, true); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", bad, err)
		}
		if _, err := s.Cancel(t.Context(), "acme", bad, true); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Cancel(%q): %v, want ErrNotFound", bad, err)
		}
	}
	if _, err := s.Get(t.Context(), "acme", id, true); errors.Is(err, job.ErrNotFound) || err == nil {
		t.Errorf("a well-formed id did not reach Redis: %v", err)
	}
}

// TestJobOfAnUntaggedIDIsFound covers the ids of version 7 that jobs
// created before ids had tags keep: such a job is found by its lookup key
// and, once that expired, by asking each queue. The job is made as an
// earlier version's crashed submit leaves it: an idempotency record
// naming the id, whose replay creates the job.
func TestJobOfAnUntaggedIDIsFound(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		fx.submit(t, "acme", job.Submission{Kind: "echo", Queue: "a"})
		sub := job.Submission{Kind: "echo", Queue: "b"}
		j, _, err := fx.store.Submit(ctx, "acme", sub, "k")
		if err != nil {
			t.Fatal(err)
		}
		old := uuid.Must(uuid.NewV7()).String()
		rec := fx.rdb.Get(ctx, fx.keys.Idempotency("acme", "k")).Val()
		fx.rdb.Set(ctx, fx.keys.Idempotency("acme", "k"), strings.Replace(rec, j.ID, old, 1), time.Hour)
		fx.rdb.Set(ctx, fx.keys.JobQueue(old), "b", time.Hour)
		if got, _, err := fx.store.Submit(ctx, "acme", sub, "k"); err != nil || got.ID != old {
			t.Fatalf("replay of the old record = %+v, %v", got, err)
		}
		if got, err := fx.store.Get(ctx, "acme", old, false); err != nil || got.Queue != "b" {
			t.Fatalf("Get by its lookup: %+v, %v", got, err)
		}
		fx.rdb.Del(ctx, fx.keys.JobQueue(old))
		if got, err := fx.store.Get(ctx, "acme", old, false); err != nil || got.Queue != "b" {
			t.Fatalf("Get after the lookup expired: %+v, %v", got, err)
		}
		if got, err := fx.store.Cancel(ctx, "acme", old, false); err != nil || got.State != job.StateCancelled {
			t.Fatalf("Cancel after the lookup expired: %+v, %v", got, err)
		}
	})
}

// TestJobsOfQueuesSharingATagAreFound: two queues whose names have one
// tag, the second new to a Store that had read the set of queues before
// it existed; each job is found by its id alone.
func TestJobsOfQueuesSharingATagAreFound(t *testing.T) {
	t.Parallel()
	a, b := sameTag()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		ja := fx.submit(t, "acme", job.Submission{Kind: "echo", Queue: a})
		if _, err := fx.store.Get(ctx, "acme", ja.ID, false); err != nil {
			t.Fatal(err)
		}
		other := store.New(fx.rdb, store.Config{Prefix: fx.prefix})
		jb, _, err := other.Submit(ctx, "acme", job.Submission{Kind: "echo", Queue: b}, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []job.Job{ja, jb} {
			if got, err := fx.store.Get(ctx, "acme", want.ID, false); err != nil || got.Queue != want.Queue {
				t.Errorf("Get(%s of %s) = %+v, %v", want.ID, want.Queue, got, err)
			}
		}
		if _, err := fx.store.Get(ctx, "acme", jobid.New(b), false); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("an id of no job: %v", err)
		}
	})
}

// sameTag returns two queue names with one tag.
func sameTag() (string, string) {
	seen := map[uint16]string{}
	for i := 0; ; i++ {
		name := "q" + strconv.Itoa(i)
		if other, ok := seen[jobid.Tag(name)]; ok {
			return other, name
		}
		seen[jobid.Tag(name)] = name
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{Retention: 48 * time.Hour}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		q := job.DefaultQueue
		t.Run("queued", func(t *testing.T) {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo", MaxWait: dur(time.Hour)})
			statsBefore := fx.stats(t, q)
			got, err := fx.store.Cancel(ctx, "acme", j.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != job.StateCancelled || got.FinishedAt == nil || got.Error == nil ||
				got.Error.Code != job.CodeCancelled || got.Error.Message == "" || got.CancelRequested {
				t.Errorf("cancelled job: %+v (error %+v)", got, got.Error)
			}
			for name, key := range map[string]string{"ready": fx.keys.QueueReady(q), "deadlines": fx.keys.QueueDeadlines(q)} {
				if err := fx.rdb.ZScore(ctx, key, j.ID).Err(); !errors.Is(err, redis.Nil) {
					t.Errorf("still in %s: %v", name, err)
				}
			}
			if want := bump(statsBefore, "queued/acme", -1); !mapsEqual(fx.stats(t, q), want) {
				t.Errorf("stats %v, want %v", fx.stats(t, q), want)
			}
			// Retention: the job is retired, to be deleted 48h after it ended.
			deleteAt := time.UnixMilli(int64(fx.rdb.ZScore(ctx, fx.keys.QueueRetired(q), j.ID).Val()))
			if want := got.FinishedAt.Add(48 * time.Hour); !deleteAt.Equal(want) {
				t.Errorf("retired until %v, want %v (48h after it ended)", deleteAt, want)
			}
			// Again: no change, no error, no second event.
			again, err := fx.store.Cancel(ctx, "acme", j.ID, false)
			if err != nil || again.State != job.StateCancelled || again.FinishedAt == nil || !again.FinishedAt.Equal(*got.FinishedAt) {
				t.Errorf("second cancel: %+v, %v", again, err)
			}
			if n := len(fx.events(t, j.ID)); n != 2 {
				t.Errorf("%d events, want queued and cancelled", n)
			}
			if want := bump(statsBefore, "queued/acme", -1); !mapsEqual(fx.stats(t, q), want) {
				t.Errorf("stats after a second cancel %v, want %v", fx.stats(t, q), want)
			}
		})
		t.Run("delayed", func(t *testing.T) {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo", Delay: dur(time.Hour)})
			if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
				t.Fatal(err)
			}
			if err := fx.rdb.ZScore(ctx, fx.keys.QueueScheduled(q), j.ID).Err(); !errors.Is(err, redis.Nil) {
				t.Errorf("still scheduled: %v", err)
			}
		})
		t.Run("retrying", func(t *testing.T) {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			// What a failed attempt does: back off in scheduled.
			fx.rdb.ZRem(ctx, fx.keys.QueueReady(q), j.ID)
			fx.rdb.ZAdd(ctx, fx.keys.QueueScheduled(q), redis.Z{Score: 1e13, Member: j.ID})
			fx.setState(t, j, job.StateQueued, job.StateRetrying)
			statsBefore := fx.stats(t, q)
			got, err := fx.store.Cancel(ctx, "acme", j.ID, false)
			if err != nil || got.State != job.StateCancelled {
				t.Fatalf("cancel of a retrying job: %+v, %v", got, err)
			}
			if err := fx.rdb.ZScore(ctx, fx.keys.QueueScheduled(q), j.ID).Err(); !errors.Is(err, redis.Nil) {
				t.Errorf("still scheduled: %v", err)
			}
			if want := bump(statsBefore, "retrying/acme", -1); !mapsEqual(fx.stats(t, q), want) {
				t.Errorf("stats %v, want %v", fx.stats(t, q), want)
			}
		})
		t.Run("running", func(t *testing.T) {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			fx.rdb.ZRem(ctx, fx.keys.QueueReady(q), j.ID)
			fx.setState(t, j, job.StateQueued, job.StateRunning)
			statsBefore := fx.stats(t, q)
			for range 2 { // the second changes nothing
				got, err := fx.store.Cancel(ctx, "acme", j.ID, false)
				if err != nil || got.State != job.StateRunning || !got.CancelRequested || got.FinishedAt != nil {
					t.Fatalf("cancel of a running job: %+v, %v", got, err)
				}
			}
			if !mapsEqual(fx.stats(t, q), statsBefore) {
				t.Errorf("stats moved: %v, was %v", fx.stats(t, q), statsBefore)
			}
			if err := fx.rdb.ZScore(ctx, fx.keys.QueueRetired(q), j.ID).Err(); !errors.Is(err, redis.Nil) {
				t.Errorf("running job retired: %v", err)
			}
			if n := len(fx.events(t, j.ID)); n != 1 {
				t.Errorf("%d events, want only queued", n)
			}
		})
		for _, end := range []job.State{job.StateSucceeded, job.StateFailed, job.StateExpired} {
			t.Run(string(end), func(t *testing.T) {
				j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
				fx.rdb.ZRem(ctx, fx.keys.QueueReady(q), j.ID)
				fx.setState(t, j, job.StateQueued, end)
				got, err := fx.store.Cancel(ctx, "acme", j.ID, false)
				if !errors.Is(err, job.ErrConflict) || got.ID != j.ID || got.State != end {
					t.Errorf("cancel of a %s job: %+v, %v; want the job and ErrConflict", end, got, err)
				}
			})
		}
		t.Run("admin", func(t *testing.T) {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			if got, err := fx.store.Cancel(ctx, "admin", j.ID, true); err != nil || got.State != job.StateCancelled {
				t.Errorf("admin cancel: %+v, %v", got, err)
			}
		})
		t.Run("unknown", func(t *testing.T) {
			if _, err := fx.store.Cancel(ctx, "acme", uuid.Must(uuid.NewV7()).String(), false); !errors.Is(err, job.ErrNotFound) {
				t.Errorf("cancel of an unknown job: %v", err)
			}
		})
	})
}

// setState moves j from one state to another the way the execution
// package's scripts do: the field and the stats together, a state not
// ended counted for the job's tenant.
func (fx fixture) setState(t testing.TB, j job.Job, from, to job.State) {
	t.Helper()
	ctx := t.Context()
	if _, err := fx.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, fx.keys.Job(j.Queue, j.ID), "state", string(to))
		for state, delta := range map[job.State]int64{from: -1, to: 1} {
			if !state.Terminal() {
				p.HIncrBy(ctx, fx.keys.QueueStats(j.Queue), string(state)+"/"+j.Tenant, delta)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func bump(m map[string]string, kv ...any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		n, _ := strconv.Atoi(out[kv[i].(string)])
		n += kv[i+1].(int)
		out[kv[i].(string)] = strconv.Itoa(n)
		if n == 0 {
			delete(out, kv[i].(string))
		}
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestStatsAreExact(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		var all []job.Job
		for i := range 12 {
			s := job.Submission{Kind: "echo", Queue: []string{"alpha", "beta"}[i%2]}
			if i%5 == 0 {
				s.Delay = dur(time.Hour)
			}
			all = append(all, fx.submit(t, "acme", s))
		}
		for i, j := range all {
			switch i % 4 {
			case 1:
				if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
					t.Fatal(err)
				}
			case 2:
				fx.rdb.ZRem(ctx, fx.keys.QueueReady(j.Queue), j.ID)
				fx.setState(t, j, job.StateQueued, job.StateRunning)
				if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The truth: count the records themselves.
		want := map[string]*job.QueueStats{"alpha": {Name: "alpha"}, "beta": {Name: "beta"}}
		for _, j := range all {
			got, err := fx.store.Get(ctx, "acme", j.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			switch got.State {
			case job.StateQueued:
				want[got.Queue].Queued++
			case job.StateRunning:
				want[got.Queue].Running++
			case job.StateRetrying:
				want[got.Queue].Retrying++
			}
		}
		// The counts of all tenants are the sums of each tenant's: the
		// counts of all tenants that versions before issue 23's writers
		// kept are not read.
		for _, q := range []string{"alpha", "beta"} {
			fx.rdb.HSet(ctx, fx.keys.QueueStats(q), "queued", 99, "running", -7)
		}
		stats, err := fx.store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(stats) != 2 || stats[0] != *want["alpha"] || stats[1] != *want["beta"] {
			t.Errorf("Stats = %+v, want %+v %+v", stats, *want["alpha"], *want["beta"])
		}
		if want["alpha"].Queued+want["beta"].Queued != 6 || want["alpha"].Running+want["beta"].Running != 3 {
			t.Errorf("the mix is not what the test meant: %+v %+v", *want["alpha"], *want["beta"])
		}
	})
}

// A long stream is read a page at a time: no read returns more than
// EventsPage events, and the pages together are the whole stream, once.
func TestEventsAreReadInPages(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		const logs = 2*job.EventsPage + 50
		for i := range logs {
			fx.rdb.XAdd(ctx, &redis.XAddArgs{Stream: fx.keys.JobEvents(j.Queue, j.ID), Values: []any{"type", "log", "data", strconv.Itoa(i)}})
		}
		var all []job.Event
		after := ""
		for range 10 {
			page, err := fx.store.Events(ctx, "acme", j.ID, false, after, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > job.EventsPage {
				t.Fatalf("one read returned %d events, more than a page (%d)", len(page), job.EventsPage)
			}
			if len(page) == 0 {
				break
			}
			all, after = append(all, page...), page[len(page)-1].ID
		}
		if len(all) != logs+1 || all[0].Type != "state" || string(all[logs].Data) != strconv.Itoa(logs-1) {
			t.Errorf("%d events read in pages, want the state event and %d logs in order", len(all), logs)
		}
	})
}

func TestEvents(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		evs, err := fx.store.Events(ctx, "acme", j.ID, false, "", 0)
		if err != nil || len(evs) != 1 || evs[0].Type != "state" || !fx.isNow(t, "acme", j.ID, evs[0]) {
			t.Fatalf("first events: %+v, %v", evs, err)
		}
		first := evs[0].ID
		if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
			t.Fatal(err)
		}
		evs, err = fx.store.Events(ctx, "acme", j.ID, false, first, 0)
		if err != nil || len(evs) != 1 || !fx.isNow(t, "acme", j.ID, evs[0]) || !bytes.Contains(evs[0].Data, []byte(`"state":"cancelled"`)) {
			t.Fatalf("events after %s: %+v, %v", first, evs, err)
		}
		last := evs[0].ID
		if evs, err := fx.store.Events(ctx, "acme", j.ID, false, last, 0); err != nil || len(evs) != 0 {
			t.Errorf("events after the last: %+v, %v", evs, err)
		}
		if evs, err := fx.store.Events(ctx, "acme", j.ID, false, last, 20*time.Millisecond); err != nil || len(evs) != 0 {
			t.Errorf("blocking with nothing new: %+v, %v", evs, err)
		}
		// Below a millisecond, BLOCK would round to 0, which means forever.
		short, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		if evs, err := fx.store.Events(short, "acme", j.ID, false, last, time.Microsecond); err != nil || len(evs) != 0 {
			t.Errorf("blocking for 1µs: %+v, %v", evs, err)
		}
		if evs, err := fx.store.Events(ctx, "admin", j.ID, true, "", 0); err != nil || len(evs) != 2 {
			t.Errorf("admin: %+v, %v", evs, err)
		}
		for _, bad := range []string{"x", "1-x", "-1", "1-2-3", "99999999999999999999999-0"} {
			if _, err := fx.store.Events(ctx, "acme", j.ID, false, bad, 0); !errors.Is(err, job.ErrBadCursor) {
				t.Errorf("after %q: %v, want ErrBadCursor", bad, err)
			}
		}

		// A blocked reader wakes up for the next event.
		done := make(chan []job.Event)
		go func() {
			evs, err := fx.store.Events(ctx, "acme", j.ID, false, last, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			done <- evs
		}()
		testenv.Eventually(t, 10*time.Second, func() bool { return fx.blockedClients(t) > 0 }, "reader never blocked")
		fx.rdb.XAdd(ctx, &redis.XAddArgs{Stream: fx.keys.JobEvents(j.Queue, j.ID),
			Values: []string{"type", "progress", "data", `{"tick":1}`}})
		select {
		case evs := <-done:
			if len(evs) != 1 || evs[0].Type != "progress" || string(evs[0].Data) != `{"tick":1}` {
				t.Errorf("blocked read: %+v", evs)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("blocked reader not woken")
		}
	})
}

// isNow reports whether state event e shows job id of tenant as it is now
// (job.Job.At).
func (fx fixture) isNow(t testing.TB, tenant, id string, e job.Event) bool {
	t.Helper()
	now, err := fx.store.Get(t.Context(), tenant, id, false)
	if err != nil {
		t.Fatal(err)
	}
	at, err := now.At(e)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(at)
	b, _ := json.Marshal(now)
	if !bytes.Equal(a, b) {
		t.Logf("event %s shows\n%s\nthe job is\n%s", e.Data, a, b)
	}
	return bytes.Equal(a, b)
}

// loseReply is a connection that, once, lets Redis run a command whose
// bytes contain marker, then drops the connection before its reply is
// read, as a network failure would: go-redis then resends the command.
type loseReply struct {
	net.Conn
	marker []byte
	lost   *atomic.Int32
	armed  bool
}

func (c *loseReply) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.marker) && c.lost.CompareAndSwap(0, 1) {
		c.armed = true
	}
	return c.Conn.Write(p)
}

func (c *loseReply) Read(p []byte) (int, error) {
	if !c.armed {
		return c.Conn.Read(p)
	}
	// The first byte of the reply proves Redis ran the command.
	if _, err := c.Conn.Read(p[:1]); err != nil {
		return 0, err
	}
	c.Conn.Close()
	return 0, io.EOF
}

// A submit whose reply was lost is resent by go-redis; the resent script
// finds the job it created itself and still reports it created (201,
// Location, the count, the wake-up), not as an idempotent replay.
func TestSubmitResentAfterALostReplyIsCreated(t *testing.T) {
	t.Parallel()
	for _, idemKey := range []string{"", "k-1"} {
		t.Run(fmt.Sprintf("idempotency key %q", idemKey), func(t *testing.T) {
			t.Parallel()
			var lost atomic.Int32
			dialer := net.Dialer{}
			rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr(),
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := dialer.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &loseReply{Conn: conn, marker: []byte("resent.kind"), lost: &lost}, nil
				}})
			t.Cleanup(func() { rdb.Close() })
			fx := newFixture(t, rdb, store.Config{})
			// Redis knows the script before the reply is lost, so the
			// lost reply is the script's, not a NOSCRIPT.
			fx.submit(t, "acme", job.Submission{Kind: "warm.up"})
			sub := job.Submission{Kind: "resent.kind"}
			j, created, err := fx.store.Submit(t.Context(), "acme", sub, idemKey)
			if err != nil {
				t.Fatal(err)
			}
			if lost.Load() != 1 {
				t.Fatal("no reply was lost: the test proved nothing")
			}
			if !created {
				t.Errorf("a resent submit reported its own job as existing: %+v", j)
			}
			// Run twice, the script counted its job once.
			days := []usage.Day{{Date: time.Now().UTC().Truncate(24 * time.Hour)}}
			if err := fx.store.AddUsage(t.Context(), "acme", usage.Lifecycle(), days); err != nil || days[0].Counts[usage.JobsSubmitted] != 2 {
				t.Errorf("jobs_submitted of the warm-up and the resent job: %v, %v; want 2", days[0].Counts, err)
			}
			if idemKey == "" {
				return
			}
			again, created, err := fx.store.Submit(t.Context(), "acme", sub, idemKey)
			if err != nil || created || again.ID != j.ID {
				t.Errorf("a replay of the key: created %v, id %s (want %s), %v", created, again.ID, j.ID, err)
			}
		})
	}
}

// TestReadsByTaggedIDDoNotSearch: once a Store knows the queue of an id's
// tag, a Get sends one round trip (the job's read) and a Cancel two (its
// lane, its script), not a search for the queue first.
func TestReadsByTaggedIDDoNotSearch(t *testing.T) {
	t.Parallel()
	trips := &tripCount{}
	counted := testenv.Redis(t).Client(t)
	counted.AddHook(trips)
	fx := newFixture(t, counted, store.Config{})
	ctx := t.Context()
	j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
	if _, err := fx.store.Get(ctx, "acme", j.ID, false); err != nil { // learns the queues
		t.Fatal(err)
	}
	before := trips.n.Load()
	if got, err := fx.store.Get(ctx, "acme", j.ID, false); err != nil || got.ID != j.ID {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if n := trips.n.Load() - before; n != 1 {
		t.Errorf("Get took %d round trips, want 1", n)
	}
	if _, err := fx.store.Cancel(ctx, "acme", fx.submit(t, "acme", job.Submission{Kind: "echo"}).ID, false); err != nil {
		t.Fatal(err) // loads the script: its first run is two round trips
	}
	before = trips.n.Load()
	if got, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil || got.State != job.StateCancelled {
		t.Fatalf("Cancel = %+v, %v", got, err)
	}
	if n := trips.n.Load() - before; n != 2 {
		t.Errorf("Cancel took %d round trips, want 2", n)
	}
}

// tripCount counts a client's round trips: each command or pipeline.
type tripCount struct{ n atomic.Int64 }

func (c *tripCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
