package httpapi_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/httpapi"
)

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k, err := httpapi.ParseKeys(" acme:k1 ,acme:k2, admin:a:b:c,,")
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 3 {
		t.Errorf("%d keys", k.Len())
	}
	for key, want := range map[string]string{"k1": "acme", "k2": "acme", "a:b:c": "admin"} {
		if got, ok := k.Tenant(key); !ok || got != want {
			t.Errorf("Tenant(%q) = %q %v, want %q", key, got, ok, want)
		}
	}
	for _, key := range []string{"", "k", "k1 ", "K1", "admin:a:b:c", "a"} {
		if got, ok := k.Tenant(key); ok {
			t.Errorf("Tenant(%q) = %q", key, got)
		}
	}

	for in, want := range map[string]string{
		"":                      "none given",
		" , ":                   "none given",
		"acme":                  "pair 1: want tenant:key",
		":secret":               "pair 1: empty tenant",
		"acme:":                 "pair 1 (tenant acme): empty key",
		"acme:k1,globex:k1":     "pair 2 (tenant globex): duplicate key",
		"acme:k1,acme:k1":       "pair 2 (tenant acme): duplicate key",
		"a b:k":                 "pair 1: job: invalid tenant name",
		"{x}:k":                 "pair 1: job: invalid tenant name",
		"acme:has space":        "a key must be printable ASCII",
		"acme:ключ":             "a key must be printable ASCII",
		"ok:k1,broken,ok2:k2":   "pair 2: want tenant:key",
		"acme:top-secret-value": "",
	} {
		_, err := httpapi.ParseKeys(in)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseKeys(%q): %v", in, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseKeys(%q) = %v, want an error with %q", in, err, want)
		case err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "k1")):
			t.Errorf("ParseKeys(%q): the error shows a key: %v", in, err)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := httpapi.New(httpapi.Config{}); err == nil {
		t.Error("no Redis: accepted")
	}
}
