package httpapi_test

import (
	"fmt"

	"github.com/leasehold/leasehold/internal/httpapi"
)

// API keys come from LEASEHOLD_API_KEYS; a tenant may hold several keys,
// and the tenant admin acts on every tenant's jobs.
func ExampleParseKeys() {
	keys, err := httpapi.ParseKeys("acme:s3cret-0123456789-1,acme:s3cret-0123456789-2,admin:r00t-0123456789abcdef")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"s3cret-0123456789-2", "r00t-0123456789abcdef", "guess"} {
		tenant, ok := keys.Tenant(key)
		fmt.Println(tenant, ok)
	}
	_, err = httpapi.ParseKeys("acme:s3cret-0123456789,globex:s3cret-0123456789")
	fmt.Println(err)
	// Output:
	// acme true
	// admin true
	//  false
	// api keys: pair 2 (tenant globex): duplicate key
}
