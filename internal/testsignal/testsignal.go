// Package testsignal lets a test wait until a component has reached a
// point in its code, instead of sleeping and hoping it got there, as
// River's rivershared/testsignal does.
//
// A component keeps a *Signal, nil outside tests, and fires it at the
// point (for example "idle: subscribed to wake-ups, about to wait"); its
// package's export_test.go lets the package's tests set it. Firing a nil
// Signal does nothing, so the product pays one nil check.
package testsignal

import "time"

// buffered is how many fires a Signal keeps that no test has waited for
// yet; later ones are dropped, so a component never blocks on a test.
const buffered = 64

// Signal is a point a component fires and a test waits for.
type Signal struct{ fired chan struct{} }

// New returns a signal for a test to hand to a component.
func New() *Signal { return &Signal{fired: make(chan struct{}, buffered)} }

// Fire notes that the component reached the point. It never blocks, and
// does nothing on a nil Signal.
func (s *Signal) Fire() {
	if s == nil {
		return
	}
	select {
	case s.fired <- struct{}{}:
	default:
	}
}

// TB is the part of testing.TB that Wait needs: this package is linked
// into the product, which does not import testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Wait waits for a fire not waited for yet, and fails tb if none comes
// within timeout.
func (s *Signal) Wait(tb TB, timeout time.Duration) {
	tb.Helper()
	select {
	case <-s.fired:
	case <-time.After(timeout):
		tb.Fatalf("testsignal: not fired within %v", timeout)
	}
}
