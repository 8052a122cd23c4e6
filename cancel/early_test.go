package cancel

import (
	"strconv"
	"testing"
	"time"
)

// The ids messages named while nobody watched them are kept at least
// earlyFor and at most twice that, and at most earlyMax a generation.
func TestEarlyIDsAreKeptForAWhileAndBounded(t *testing.T) {
	w := &Watcher{}
	kept := func(id string) bool {
		_, now := w.early.now[id]
		_, before := w.early.before[id]
		return now || before
	}
	t0 := time.Now()
	w.keepEarly("a", t0)
	w.keepEarly("b", t0.Add(earlyFor-time.Millisecond))
	if !kept("a") || !kept("b") {
		t.Fatal("an id was forgotten within earlyFor")
	}
	w.keepEarly("c", t0.Add(earlyFor)) // a new generation: a and b are the one before
	if !kept("a") || !kept("b") || !kept("c") {
		t.Fatal("an id was forgotten within earlyFor of the last rotation")
	}
	w.keepEarly("d", t0.Add(2*earlyFor))
	if kept("a") || kept("b") {
		t.Fatal("ids kept past two generations")
	}
	if !kept("c") || !kept("d") {
		t.Fatal("the last two generations' ids were forgotten")
	}
	for i := range 3 * earlyMax {
		w.keepEarly(strconv.Itoa(i), t0.Add(2*earlyFor))
	}
	if n := len(w.early.now); n != earlyMax {
		t.Fatalf("a generation holds %d ids, want at most %d", n, earlyMax)
	}
}
