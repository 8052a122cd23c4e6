package testsignal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testsignal"
)

// failure records a Fatalf instead of ending the test.
type failure struct{ msg string }

func (*failure) Helper()                             {}
func (f *failure) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestWaitTakesEachFireOnceAndFailsWithoutOne(t *testing.T) {
	var off *testsignal.Signal
	off.Fire() // the product's case: nothing happens

	s := testsignal.New()
	s.Fire()
	s.Fire()
	for range 2 {
		var f failure
		s.Wait(&f, time.Second)
		if f.msg != "" {
			t.Fatalf("a fire was not waited for: %s", f.msg)
		}
	}
	var f failure
	s.Wait(&f, 10*time.Millisecond)
	if f.msg == "" {
		t.Fatal("Wait passed with every fire already taken")
	}
}
