package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/job"
)

// An API handler decodes the body strictly, then validates it; each field
// error goes to the client as {"field", "message"}.
func ExampleSubmission_Validate() {
	body := `{"kind": "llm.chat", "queue": "{gpu}", "timeout": "-5s", "concurrency_keys": ["model:*"]}`
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var s job.Submission
	if err := dec.Decode(&s); err != nil {
		fmt.Println("400:", err)
		return
	}
	var verr *job.ValidationError
	if errors.As(s.Validate(), &verr) {
		for _, f := range verr.Errors {
			fmt.Printf("%s: %s\n", f.Field, f.Message)
		}
	}
	// Output:
	// queue: must match ^[a-zA-Z0-9_.-]{1,64}$
	// timeout: must not be negative
	// concurrency_keys[0]: must not contain '*': a job names one limit, '*' is for defining limits
}
