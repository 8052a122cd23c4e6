package job

// MaxBatch is the most submissions one SubmitBatch takes.
const MaxBatch = 1000

// BatchItem is one submission of a batch, with its own idempotency key.
type BatchItem struct {
	Submission     Submission
	IdempotencyKey string // "" = none
}

// BatchResult is what became of one item of a batch: its job, created or
// (Created false) the one an earlier request with its idempotency key
// created; or Err, why it was refused, in which case nothing of it was
// written, unless Err is an *UnansweredError.
type BatchResult struct {
	Job     Job
	Created bool
	Err     error
}

// UnansweredError is the Err of a batch item that a failure (Redis's)
// left unanswered: the item may have been created, or not. Its
// idempotency record is kept, so resending the item with its key answers
// the job if it was created and creates it if not.
type UnansweredError struct{ Err error }

func (e *UnansweredError) Error() string { return "job: not answered: " + e.Err.Error() }

func (e *UnansweredError) Unwrap() error { return e.Err }

// SubmitChunk is the most items one run of the submit script takes.
const SubmitChunk = 100
