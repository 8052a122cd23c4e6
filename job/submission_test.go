package job_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/job"
)

func dur(d time.Duration) job.Duration { return job.Duration(d) }

func TestSubmissionDecoding(t *testing.T) {
	t.Parallel()
	decode := func(body string) (job.Submission, error) {
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		var s job.Submission
		err := dec.Decode(&s)
		return s, err
	}
	s, err := decode(`{"kind":"llm.chat","timeout":"90s","max_wait":"5m","delay":null,"input":{"b":1}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s.Timeout != dur(90*time.Second) || s.MaxWait != dur(5*time.Minute) || s.Delay != 0 {
		t.Errorf("durations %v %v %v", s.Timeout, s.MaxWait, s.Delay)
	}
	for _, bad := range []string{
		`{"kind":"x","color":"red"}`, // unknown field
		`{"kind":"x","timeout":30}`,  // a number, not a duration string
		`{"kind":"x","timeout":"soon"}`,
		`{"kind":"x","priority":1.5}`,
	} {
		if _, err := decode(bad); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
	// A negative duration decodes; Validate names it.
	s, err = decode(`{"kind":"x","timeout":"-5s"}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "timeout: must not be negative") {
		t.Errorf("Validate = %v", err)
	}
	b, err := json.Marshal(job.Submission{Kind: "x", Timeout: dur(10 * time.Minute)})
	if err != nil || !bytes.Contains(b, []byte(`"timeout":"10m0s"`)) {
		t.Errorf("marshal = %s, %v", b, err)
	}
}

// A zero the client wrote is checked as a value; a zero left out is the
// default.
func TestValidateGivenChecksExplicitZeros(t *testing.T) {
	t.Parallel()
	zero := job.Submission{Kind: "echo"}
	if err := zero.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	given := map[string]bool{"queue": true, "max_attempts": true, "timeout": true, "max_wait": true,
		"on_busy": true, "priority": true, "delay": true, "concurrency_keys": true}
	err := zero.ValidateGiven(given)
	var v *job.ValidationError
	if !errors.As(err, &v) {
		t.Fatalf("ValidateGiven = %v", err)
	}
	var fields []string
	for _, f := range v.Errors {
		fields = append(fields, f.Field)
	}
	if want := []string{"queue", "max_attempts", "timeout", "max_wait", "on_busy"}; !slices.Equal(fields, want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
}
