package httpapi_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/httpapi"
)

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k, err := httpapi.ParseKeys(" acme:k1-0123456789abcdef ,acme:k2-0123456789abcdef, admin:a:b:c-0123456789abcdef,,")
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 3 {
		t.Errorf("%d keys", k.Len())
	}
	for key, want := range map[string]string{"k1-0123456789abcdef": "acme", "k2-0123456789abcdef": "acme", "a:b:c-0123456789abcdef": "admin"} {
		if got, ok := k.Tenant(key); !ok || got != want {
			t.Errorf("Tenant(%q) = %q %v, want %q", key, got, ok, want)
		}
	}
	for _, key := range []string{"", "k", "k1-0123456789abcdef ", "K1-0123456789ABCDEF", "admin:a:b:c-0123456789abcdef", "a"} {
		if got, ok := k.Tenant(key); ok {
			t.Errorf("Tenant(%q) = %q", key, got)
		}
	}

	const k1 = "k1-0123456789abcdef"
	for in, want := range map[string]string{
		"":                                    "none given",
		" , ":                                 "none given",
		"acme":                                "pair 1: want tenant:key",
		":secret-0123456789":                  "pair 1: empty tenant",
		"acme:":                               "pair 1 (tenant acme): empty key",
		"acme:" + k1 + ",globex:" + k1:        "pair 2 (tenant globex): duplicate key",
		"acme:" + k1 + ",acme:" + k1:          "pair 2 (tenant acme): duplicate key",
		"a b:" + k1:                           "pair 1: job: invalid tenant name",
		"{x}:" + k1:                           "pair 1: job: invalid tenant name",
		"acme:has space 0123456789":           "a key must be printable ASCII",
		"acme:ключ-0123456789abcdef":          "a key must be printable ASCII",
		"ok:" + k1 + ",broken,ok2:k2":         "pair 2: want tenant:key",
		"acme:top-secret-value-01":            "",
		"acme:k1":                             "pair 1 (tenant acme): a key must have at least 16 characters",
		"acme:" + k1 + ",admin:secret-012345": "pair 2 (tenant admin): a key must have at least 16 characters",
		"acme:" + k1 + ",admin:REPLACE-ME":    "pair 2 (tenant admin): a key must have at least 16 characters",
		"admin:REPLACE-ME-REPLACE-ME":         "pair 1 (tenant admin): the key is a placeholder",
		"admin:please_replace_me_0123":        "pair 1 (tenant admin): the key is a placeholder",
		"acme:example-key-change-me":          "pair 1 (tenant acme): the key is a placeholder",
		"acme:CHANGEME0123456789":             "pair 1 (tenant acme): the key is a placeholder",
		"acme:your-placeholder-key":           "pair 1 (tenant acme): the key is a placeholder",
		"acme:0123456789abcdef":               "",
	} {
		_, err := httpapi.ParseKeys(in)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseKeys(%q): %v", in, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseKeys(%q) = %v, want an error with %q", in, err, want)
		case err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "k1") ||
			strings.Contains(strings.ToLower(err.Error()), "replace")):
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
