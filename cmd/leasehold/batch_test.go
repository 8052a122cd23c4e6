package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
)

// A batch request carries at most job.MaxBatch lines and, but for a line
// alone, no more bytes than the API's default batch body.
func TestBatchOf(t *testing.T) {
	lines := func(n, size int) []json.RawMessage {
		l := make([]json.RawMessage, n)
		for i := range l {
			l[i] = bytes.Repeat([]byte("x"), size)
		}
		return l
	}
	for _, c := range []struct {
		name  string
		lines []json.RawMessage
		want  int
	}{
		{"a few small lines", lines(3, 100), 3},
		{"more small lines than a batch", lines(job.MaxBatch+1, 100), job.MaxBatch},
		{"lines of 1 MiB", lines(40, 1<<20), 15},
		{"one line over the body", lines(2, httpapi.DefaultMaxBatchBody+1), 1},
	} {
		n := batchOf(c.lines)
		if n != c.want {
			t.Errorf("%s: %d lines a request, want %d", c.name, n, c.want)
		}
		size := len(`{"jobs":[]}`) + n
		for _, l := range c.lines[:n] {
			size += len(l)
		}
		if n > 1 && size > httpapi.DefaultMaxBatchBody {
			t.Errorf("%s: %d bytes a request, over %d", c.name, size, httpapi.DefaultMaxBatchBody)
		}
	}
}
