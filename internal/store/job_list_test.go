package store_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/store"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
)

// listAll follows cursors from the first page to the last and returns the
// ids in the order they came, failing on any repeat.
func listAll(t *testing.T, fx fixture, q job.ListQuery) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging never ends")
		}
		jobs, next, err := fx.store.List(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) > cmpOr(q.Limit, 50) {
			t.Fatalf("page of %d jobs, limit %d", len(jobs), q.Limit)
		}
		for _, j := range jobs {
			if seen[j.ID] {
				t.Fatalf("job %s listed twice", j.ID)
			}
			seen[j.ID] = true
			ids = append(ids, j.ID)
		}
		if next == "" {
			return ids
		}
		q.Cursor = next
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// newestFirst returns the ids of the jobs that keep holds, in listing order.
func newestFirst(jobs []job.Job, keep func(job.Job) bool) []string {
	var sel []job.Job
	for _, j := range jobs {
		if keep(j) {
			sel = append(sel, j)
		}
	}
	slices.SortFunc(sel, func(a, b job.Job) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	ids := make([]string, len(sel))
	for i, j := range sel {
		ids[i] = j.ID
	}
	return ids
}

func TestListPagesAcrossQueues(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		// 120 jobs, many created in the same millisecond, spread over three
		// queues, two kinds and two tenants.
		var all []job.Job
		for i := range 120 {
			tenant := "acme"
			if i%10 == 9 {
				tenant = "globex"
			}
			all = append(all, fx.submit(t, tenant, job.Submission{
				Kind:  []string{"k.even", "k.odd"}[i%2],
				Queue: []string{"q1", "q2", "q3"}[i%3],
			}))
		}
		// A tenant whose jobs have all ended: its counts are 0, and an
		// admin still lists its jobs.
		for range 2 {
			all = append(all, fx.submit(t, "initech", job.Submission{Kind: "k.even", Queue: "q1"}))
		}
		for i := range all {
			if i%11 != 0 && all[i].Tenant != "initech" {
				continue
			}
			if _, err := fx.store.Cancel(ctx, all[i].Tenant, all[i].ID, false); err != nil {
				t.Fatal(err)
			}
			all[i].State = job.StateCancelled
		}
		acme := func(j job.Job) bool { return j.Tenant == "acme" }
		cases := []struct {
			name string
			q    job.ListQuery
			keep func(job.Job) bool
		}{
			{"tenant", job.ListQuery{Tenant: "acme", Limit: 7}, acme},
			{"kind", job.ListQuery{Tenant: "acme", Limit: 7, Kind: "k.odd"},
				func(j job.Job) bool { return acme(j) && j.Kind == "k.odd" }},
			{"queue", job.ListQuery{Tenant: "acme", Limit: 7, Queue: "q2"},
				func(j job.Job) bool { return acme(j) && j.Queue == "q2" }},
			{"state", job.ListQuery{Tenant: "acme", Limit: 7, State: job.StateCancelled},
				func(j job.Job) bool { return acme(j) && j.State == job.StateCancelled }},
			{"all filters", job.ListQuery{Tenant: "acme", Limit: 3, Queue: "q1", Kind: "k.even", State: job.StateQueued},
				func(j job.Job) bool {
					return acme(j) && j.Queue == "q1" && j.Kind == "k.even" && j.State == job.StateQueued
				}},
			{"unknown queue", job.ListQuery{Tenant: "acme", Queue: "nope"}, func(job.Job) bool { return false }},
			{"admin", job.ListQuery{Admin: true, Limit: 7}, func(job.Job) bool { return true }},
			{"admin, one tenant", job.ListQuery{Admin: true, Tenant: "globex", Limit: 7},
				func(j job.Job) bool { return j.Tenant == "globex" }},
			{"default limit", job.ListQuery{Tenant: "acme"}, acme},
			{"limit 1", job.ListQuery{Tenant: "acme", Limit: 1, Queue: "q3"},
				func(j job.Job) bool { return acme(j) && j.Queue == "q3" }},
			{"limit 500", job.ListQuery{Admin: true, Limit: 500}, func(job.Job) bool { return true }},
		}
		for _, c := range cases {
			got := listAll(t, fx, c.q)
			want := newestFirst(all, c.keep)
			if !slices.Equal(got, want) {
				t.Errorf("%s: listed %d jobs, want %d\n got %v\nwant %v", c.name, len(got), len(want), got, want)
			}
		}
		// Full pages: limit 7 over 108 jobs is 15 pages of 7 and one of 3.
		q := job.ListQuery{Tenant: "acme", Limit: 7}
		for page := 0; ; page++ {
			jobs, next, err := fx.store.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(7, 108-7*page); len(jobs) != want {
				t.Fatalf("page %d holds %d jobs, want %d", page, len(jobs), want)
			}
			if next == "" {
				if page != 15 {
					t.Fatalf("%d pages, want 16", page+1)
				}
				break
			}
			q.Cursor = next
		}
	})
}

func TestListSkipsAndForgetsExpiredJobs(t *testing.T) {
	t.Parallel()
	eachBackend(t, store.Config{}, func(t *testing.T, fx fixture) {
		ctx := t.Context()
		a := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		b := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		fx.rdb.Del(ctx, fx.keys.Job(a.Queue, a.ID)) // as its retention would
		jobs, next, err := fx.store.List(ctx, job.ListQuery{Tenant: "acme"})
		if err != nil || next != "" || len(jobs) != 1 || jobs[0].ID != b.ID {
			t.Fatalf("List = %v, %q, %v", jobs, next, err)
		}
		if c := fx.rdb.ZCard(ctx, fx.keys.QueueTenantJobs(a.Queue, "acme")).Val(); c != 1 {
			t.Errorf("the expired job is still indexed (%d entries)", c)
		}
		if jobs[0].Input != nil {
			t.Errorf("a listing carries the input %s", jobs[0].Input)
		}
	})
}

func TestListWorkPerPageIsBounded(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t), store.Config{})
	for range 1001 {
		fx.submit(t, "acme", job.Submission{Kind: "common"})
	}
	target := fx.submit(t, "acme", job.Submission{Kind: "rare"}) // the newest
	q := job.ListQuery{Tenant: "acme", Kind: "common", Limit: 500}
	// A filter that matches: full pages.
	if jobs, next, err := fx.store.List(t.Context(), q); err != nil || len(jobs) != 500 || next == "" {
		t.Fatalf("first page: %d jobs, %q, %v", len(jobs), next, err)
	}
	// A filter that never matches past the first entry: the first page
	// stops after 1000 entries with a cursor; the next one ends the list.
	q = job.ListQuery{Tenant: "acme", Kind: "rare", Limit: 500}
	jobs, next, err := fx.store.List(t.Context(), q)
	if err != nil || len(jobs) != 1 || jobs[0].ID != target.ID || next == "" {
		t.Fatalf("first page: %d jobs, %q, %v; want the rare job and a cursor", len(jobs), next, err)
	}
	q.Cursor = next
	if jobs, next, err = fx.store.List(t.Context(), q); err != nil || len(jobs) != 0 || next != "" {
		t.Fatalf("second page: %d jobs, %q, %v; want none and the end", len(jobs), next, err)
	}
}

func TestListRefusesBadQueries(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t), store.Config{})
	id := uuid.Must(uuid.NewV7()).String()
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"!!!", enc("x:" + id), enc("123:not-a-uuid"), enc("-5:" + id), enc("123"), enc("123:{" + id + "}")} {
		if _, _, err := fx.store.List(t.Context(), job.ListQuery{Tenant: "acme", Cursor: c}); !errors.Is(err, job.ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
		}
	}
	for _, q := range []job.ListQuery{
		{Tenant: "acme", Limit: 501},
		{Tenant: "acme", Limit: -1},
		{Tenant: "acme", State: "done"},
		{Tenant: "acme", Kind: "Bad"},
		{Tenant: "acme", Queue: "{x}"},
		{Admin: true, Tenant: "a:b"},
	} {
		var verr *job.ValidationError
		if _, _, err := fx.store.List(t.Context(), q); !errors.As(err, &verr) {
			t.Errorf("%+v: %v, want a *ValidationError", q, err)
		}
	}
	if _, _, err := fx.store.List(t.Context(), job.ListQuery{}); err == nil {
		t.Error("a listing with no tenant and no admin was accepted")
	}
}

// A page can fill up in the middle of a round that reached the end of the
// index: the entries after it still belong to the next page.
func TestListPageFullInsideTheLastRound(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t), store.Config{})
	var all []job.Job
	for i := range 10 {
		all = append(all, fx.submit(t, "acme", job.Submission{Kind: []string{"a", "b"}[i%2]}))
	}
	for _, limit := range []int{1, 2, 3} {
		q := job.ListQuery{Tenant: "acme", Kind: "a", Limit: limit}
		got := listAll(t, fx, q)
		want := newestFirst(all, func(j job.Job) bool { return j.Kind == "a" })
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: got %v, want %v", limit, got, want)
		}
	}
}

// A page of big jobs ends before it holds MaxPageBytes of them, with a
// cursor: 500 jobs of 1 MiB results would otherwise make one 500 MiB
// answer. Paging on still lists every job once, whole.
func TestListPageIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t), store.Config{})
	result := `"` + strings.Repeat("r", 1<<20-2) + `"` // 1 MiB of JSON
	const n = 9
	var want []string
	for range n {
		j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
		if err := fx.rdb.HSet(t.Context(), fx.keys.Job(j.Queue, j.ID), "result", result).Err(); err != nil {
			t.Fatal(err)
		}
		want = append(want, j.ID)
	}
	jobs, next, err := fx.store.List(t.Context(), job.ListQuery{Tenant: "acme", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) == 0 || len(jobs)*len(result) > job.MaxPageBytes || next == "" {
		t.Fatalf("first page: %d jobs of %d bytes, next %q; want at most %d bytes and a cursor",
			len(jobs), len(result), next, job.MaxPageBytes)
	}
	for _, j := range jobs {
		if len(j.Result) != len(result) {
			t.Errorf("job %s listed with a result of %d bytes, want it whole (%d)", j.ID, len(j.Result), len(result))
		}
	}
	slices.Reverse(want)
	if got := listAll(t, fx, job.ListQuery{Tenant: "acme", Limit: 500}); !slices.Equal(got, want) {
		t.Errorf("paging listed %v, want %v", got, want)
	}
}

// A page's byte cap counts only the jobs it returns: big jobs that the
// filter leaves out, read between the ones it keeps, neither end the page
// early nor count against it. The page is still cut by what it returns.
func TestListPageBytesCountOnlyTheJobsListed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.Redis(t).Client(t), store.Config{})
	ctx := t.Context()
	listed := `"` + strings.Repeat("r", 1<<20-2) + `"` // 1 MiB of JSON
	other := `"` + strings.Repeat("o", 3<<20) + `"`    // 3 MiB, cancelled
	var want []string
	for range 6 {
		for _, cancelled := range []bool{false, true} {
			j := fx.submit(t, "acme", job.Submission{Kind: "echo"})
			result := listed
			if cancelled {
				if _, err := fx.store.Cancel(ctx, "acme", j.ID, false); err != nil {
					t.Fatal(err)
				}
				result = other
			} else {
				want = append(want, j.ID)
			}
			if err := fx.rdb.HSet(ctx, fx.keys.Job(j.Queue, j.ID), "result", result).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Reverse(want)
	q := job.ListQuery{Tenant: "acme", State: job.StateQueued, Limit: 500}
	jobs, next, err := fx.store.List(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// Three 1 MiB jobs and their other fields fit in MaxPageBytes, a fourth does not.
	if len(jobs) != 3 || next == "" {
		t.Fatalf("first page: %d queued jobs of 1 MiB, next %q; want 3 (the most that fit in %d bytes) and a cursor",
			len(jobs), next, job.MaxPageBytes)
	}
	if got := listAll(t, fx, q); !slices.Equal(got, want) {
		t.Errorf("paging listed %v, want %v", got, want)
	}
}

// An admin's listing merges an index per tenant: with many tenants, one of
// them busy, its pages are still every job newest first, and a page reads
// a few entries of each index, not a page of each (the bytes Redis sends
// for the page: a Redis of its own, which no other test's traffic
// counts in).
func TestAdminListOfManyTenants(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, testenv.StartRedis(t).Client(t), store.Config{})
	var all []job.Job
	for i := range 1000 {
		tenant := "busy"
		if i%3 != 0 {
			tenant = fmt.Sprintf("t%02d", i%40)
		}
		all = append(all, fx.submit(t, tenant, job.Submission{Kind: "echo"}))
	}
	for _, limit := range []int{1, 7, 50} {
		if got, want := listAll(t, fx, job.ListQuery{Admin: true, Limit: limit}), newestFirst(all, func(job.Job) bool { return true }); !slices.Equal(got, want) {
			t.Errorf("limit %d: listed %d jobs, want %d\n got %v\nwant %v", limit, len(got), len(want), got, want)
		}
	}
	sent := func() int64 {
		var n int64
		for _, line := range strings.Split(fx.rdb.Info(t.Context(), "stats").Val(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_net_output_bytes:"); ok {
				n, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return n
	}
	before := sent()
	if jobs, _, err := fx.store.List(t.Context(), job.ListQuery{Admin: true, Limit: 20}); err != nil || len(jobs) != 20 {
		t.Fatalf("a page of 20: %d jobs, %v", len(jobs), err)
	}
	// 41 indexes of 17 to 334 entries: 21 of each would be about 45 KB.
	if n := sent() - before; n > 30_000 {
		t.Errorf("a page of 20 jobs of 41 indexes took %d bytes from Redis", n)
	}
}
