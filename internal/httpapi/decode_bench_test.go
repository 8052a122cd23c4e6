package httpapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/job"
)

// BenchmarkDecodeBatch reads and checks BenchmarkSubmit's batch of 1 000
// echo jobs, without Redis: the Go work a batch does before its first
// round trip.
func BenchmarkDecodeBatch(b *testing.B) {
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf(`{"kind":"echo","input":{"n":%d},"metadata":{"batch":"bench"}}`, i)
	}
	body := []byte(`{"jobs":[` + strings.Join(items, ",") + `]}`)
	s := &server{maxBody: DefaultMaxBody, queues: []string{job.DefaultQueue}}
	b.ReportAllocs()
	for b.Loop() {
		raws, err := decodeBatch(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, errs := s.decodeItems("acme", raws); errs[0] != nil {
			b.Fatal(errs[0])
		}
	}
}
