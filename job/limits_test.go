package job_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/job"
)

func TestParseLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    map[string]job.KeyLimit
		wantErr string
	}{
		{in: "", want: map[string]job.KeyLimit{}},
		{in: " , ", want: map[string]job.KeyLimit{}},
		{in: "model:gpt-4o=200,tenant:*=10", want: map[string]job.KeyLimit{"model:gpt-4o": limitOf(200), "tenant:*": limitOf(10)}},
		{in: " model:gpt-4o = 0 , a/b.c_d-e=1000000", want: map[string]job.KeyLimit{"model:gpt-4o": limitOf(0), "a/b.c_d-e": limitOf(1000000)}},
		{in: "model:gpt-4o=200;rpm=3000;tpm=400000;adaptive", want: map[string]job.KeyLimit{
			"model:gpt-4o": {Limit: ptr(200), Budget: job.Budget{RPM: 3000, TPM: 400000, Adaptive: true}}}},
		{in: "model:mini=;tpm=400000 , model:*= 5 ; adaptive", want: map[string]job.KeyLimit{
			"model:mini": {Budget: job.Budget{TPM: 400000}}, "model:*": {Limit: ptr(5), Budget: job.Budget{Adaptive: true}}}},
		{in: "model:*=200;per_tenant=50", want: map[string]job.KeyLimit{"model:*": {Limit: ptr(200), Budget: job.Budget{PerTenant: 50}}}},
		{in: "model:x=10;per_tenant=11", wantErr: "between 1 and the limit"},
		{in: "model:x=;tpm=100;per_tenant=1", wantErr: "needs a limit"},
		{in: "model:x=10;per_tenant=0", wantErr: "per_tenant=N"},
		{in: "model:gpt-4o=;rpm=0", wantErr: "rpm=N"},
		{in: "model:gpt-4o=;tpm=x", wantErr: "tpm=N"},
		{in: "model:gpt-4o=1;burst=3", wantErr: "unknown option"},
		{in: "model:gpt-4o=1;adaptive;adaptive", wantErr: "given twice"},
		{in: "model:gpt-4o=1;adaptive=yes", wantErr: "takes no value"},
		{in: "model:gpt-4o", wantErr: "want key=N"},
		{in: "model:gpt-4o=lots", wantErr: "not a whole number"},
		{in: "model:gpt-4o=1.5", wantErr: "not a whole number"},
		{in: "model:gpt-4o=", wantErr: "give a limit"},
		{in: "model:gpt-4o=-1", wantErr: "between 0 and"},
		{in: "model:gpt-4o=1000001", wantErr: "between 0 and"},
		{in: "=5", wantErr: "must match"},
		{in: "model gpt=5", wantErr: "must match"},
		{in: "model:*x=5", wantErr: "'*'"},
		{in: "a=1,a=2", wantErr: "given twice"},
	} {
		got, err := job.ParseLimits(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseLimits(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseLimits(%q): %v", tc.in, err)
		case tc.wantErr == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("ParseLimits(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestValidateLimitKey(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"model:gpt-4o", "tenant:acme", "tenant:*", "plain", "a/b:c.d", strings.Repeat("k", 128)} {
		if err := job.ValidateLimitKey(k); err != nil {
			t.Errorf("ValidateLimitKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"", "*", ":*", "tenant:a*", "*:x", "a:b:*", "a*:*", "tenant:**", "tenant:*:x", "sp ace", "é", strings.Repeat("k", 129)} {
		if err := job.ValidateLimitKey(k); err == nil {
			t.Errorf("ValidateLimitKey(%q) accepted", k)
		}
	}
}

func ptr(n int64) *int64 { return &n }

func limitOf(n int64) job.KeyLimit { return job.KeyLimit{Limit: ptr(n)} }
