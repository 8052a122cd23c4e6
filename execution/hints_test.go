package execution

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A claim's planning is a function of what the last claim left (hints):
// these tables hold it to what each hint means.

// testKeysOf gives a test lane's keys: the lane "acme/a" names tenant:acme
// and a, "acme" tenant:acme alone.
func testKeysOf(lane string) []string {
	tenant, key, _ := strings.Cut(lane, "/")
	if key == "" {
		return []string{"tenant:" + tenant}
	}
	return []string{key, "tenant:" + tenant}
}

// blockedLanes is a waits of lanes left waiting for a full key.
func blockedLanes(lanes ...string) *waits {
	w := &waits{lanes: map[string]bool{}, keysOf: testKeysOf}
	for _, l := range lanes {
		w.lanes[l] = true
	}
	return w
}

func TestHintsLook(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		h    hints
		want int
		look int
	}{
		{"nothing waits: the head is enough", hints{}, 10, 10},
		{"a lane waits: deeper", hints{blocked: blockedLanes("acme/a")}, 10, 56},
		{"a key refused a tenant's job: deeper", hints{blocked: &waits{full: map[string]bool{"tenant:acme a": true}, keysOf: testKeysOf}}, 1, 20},
		{"deeper, but bounded", hints{blocked: blockedLanes("acme/a")}, 100, 256},
		{"an empty waits is none", hints{blocked: blockedLanes()}, 3, 3},
	} {
		if got := c.h.look(c.want); got != c.look {
			t.Errorf("%s: look(%d) = %d, want %d", c.name, c.want, got, c.look)
		}
	}
}

func TestHintsEarly(t *testing.T) {
	t.Parallel()
	tpm := func(keys []string) bool { return slices.Contains(keys, "tpm") }
	costs := &laneCosts{}
	costs.set("acme/tpm", 500)
	for _, c := range []struct {
		name  string
		h     hints
		want  int
		lanes []string // the lane of each slot asked for, in order
		cost  map[int]int64
	}{
		{"no lanes at the head: nothing", hints{}, 4, nil, nil},
		{"lanes take turns", hints{heads: []string{"acme/a", "bob/b"}}, 4,
			[]string{"acme/a", "bob/b", "acme/a", "bob/b"}, nil},
		{"as many as the claim reads of each lane", hints{heads: []string{"acme/a", "bob/b", "cid/c"}}, 3,
			[]string{"acme/a", "bob/b", "cid/c"}, nil},
		{"no more for a lane than the last claim left of it", hints{heads: []string{"acme/a", "bob/b"}, left: map[string]int{"acme/a": 1}}, 4,
			[]string{"acme/a", "bob/b", "bob/b", "bob/b"}, nil},
		{"a lane read to its end with none left: none", hints{heads: []string{"acme/a"}, left: map[string]int{"acme/a": 0}}, 4,
			nil, nil},
		{"none for a lane that waits for a full key", hints{heads: []string{"acme/a", "bob/b"}, blocked: blockedLanes("acme/a")}, 2,
			[]string{"bob/b", "bob/b"}, nil},
		{"none for a tpm lane whose cost is not known", hints{heads: []string{"bob/tpm", "acme/a"}, costs: costs}, 2,
			[]string{"acme/a", "acme/a"}, nil},
		{"a tpm lane reserves its last job's cost", hints{heads: []string{"acme/tpm", "bob/b"}, costs: costs}, 2,
			[]string{"acme/tpm", "bob/b"}, map[int]int64{0: 500}},
	} {
		if c.h.costs == nil {
			c.h.costs = &laneCosts{}
		}
		slots := c.h.early(c.want, testKeysOf, tpm)
		var lanes []string
		for i, s := range slots {
			lanes = append(lanes, s.lane)
			want, reserves := c.cost[i]
			if s.reserve != reserves || s.cost != want || !slices.Equal(s.keys, testKeysOf(s.lane)) {
				t.Errorf("%s: slot %d = %+v, want a reservation of %d (%v) of %v", c.name, i, s, want, reserves, testKeysOf(s.lane))
			}
		}
		if !slices.Equal(lanes, c.lanes) {
			t.Errorf("%s: early(%d) asks for %v, want %v", c.name, c.want, lanes, c.lanes)
		}
	}
}

func TestHintsTakeAlong(t *testing.T) {
	t.Parallel()
	fresh := &peeked{peekReply: peekReply{heads: []string{"acme/a"}}, read: time.Now().Add(time.Hour), want: 4}
	grantAll := func([]string) bool { return true }
	for _, c := range []struct {
		name     string
		along    *peeked
		want     int
		grantAll func([]string) bool
		taken    bool
	}{
		{"none read", nil, 1, grantAll, false},
		{"read for as many", fresh, 4, grantAll, true},
		{"read for fewer", fresh, 5, grantAll, false},
		{"too old", &peeked{peekReply: fresh.peekReply, read: time.Now().Add(-time.Minute), want: 4}, 1, grantAll, false},
		{"no lanes at the head", &peeked{read: fresh.read, want: 4}, 1, grantAll, false},
		{"a key that does not grant every ask", fresh, 1, func([]string) bool { return false }, false},
	} {
		h := hints{along: c.along}
		if _, ok := h.takeAlong(c.want, time.Second, c.grantAll); ok != c.taken {
			t.Errorf("%s: taken %v, want %v", c.name, ok, c.taken)
		}
	}
}

func TestAsk(t *testing.T) {
	t.Parallel()
	serves := func(lane string) bool { return !strings.HasPrefix(lane, "other") }
	for _, c := range []struct {
		name    string
		lanes   []string
		blocked *waits
		want    int
		asked   []int
	}{
		{"lanes in turn, as the claim script serves them", []string{"acme/a", "acme/a", "acme/a", "bob/b"}, nil, 3, []int{0, 3, 1}},
		{"no more than want", []string{"acme/a", "bob/b", "cid/c"}, nil, 2, []int{0, 1}},
		{"all there are", []string{"acme/a", "bob/b"}, nil, 5, []int{0, 1}},
		{"not a job gone, nor one of a kind not served", []string{"", "other/x", "acme/a"}, nil, 3, []int{2}},
		{"one waiting lane per tenant", []string{"acme/a", "acme/b", "bob/c", "acme/d"}, blockedLanes("acme/a", "acme/b", "bob/c"), 4,
			[]int{0, 2, 3}},
		{"the waiting lane asked for again in its turn", []string{"acme/a", "acme/a", "acme/b"}, blockedLanes("acme/a", "acme/b"), 3,
			[]int{0, 1}},
	} {
		ckeys := make([][]string, len(c.lanes))
		for i, l := range c.lanes {
			ckeys[i] = testKeysOf(l)
		}
		if got := ask(c.want, c.lanes, ckeys, c.blocked, serves); !slices.Equal(got, c.asked) {
			t.Errorf("%s: ask(%d) = %v, want %v", c.name, c.want, got, c.asked)
		}
	}
}

func TestJobsLeft(t *testing.T) {
	t.Parallel()
	claimed := func(lanes ...string) []*Execution {
		var out []*Execution
		for _, l := range lanes {
			out = append(out, &Execution{lane: l})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		heads   []string
		read    []string
		per     int
		claimed []*Execution
		left    map[string]int
	}{
		{"a lane read to its end", []string{"a"}, []string{"a", "a"}, 4, claimed("a"), map[string]int{"a": 1}},
		{"a lane read as deep as asked: more may wait", []string{"a"}, []string{"a", "a"}, 2, claimed("a"), map[string]int{}},
		{"a lane with none read", []string{"a", "b"}, []string{"a"}, 2, nil, map[string]int{"b": 0, "a": 1}},
		{"all taken", []string{"a"}, []string{"a"}, 2, claimed("a"), map[string]int{"a": 0}},
	} {
		got := jobsLeft(c.heads, c.read, c.per, c.claimed)
		if len(got) != len(c.left) {
			t.Errorf("%s: %v, want %v", c.name, got, c.left)
			continue
		}
		for l, n := range c.left {
			if got[l] != n {
				t.Errorf("%s: %v, want %v", c.name, got, c.left)
			}
		}
	}
}
