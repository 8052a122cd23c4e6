// Package docs carries the documents the binaries serve: the OpenAPI
// description of the HTTP API, docs/openapi.yaml, which API.md's contract
// and the contract tests keep in step with the code.
package docs

import _ "embed"

//go:embed openapi.yaml
var openAPI string

// OpenAPI returns docs/openapi.yaml, the OpenAPI 3.0 description of the
// HTTP API, as served at GET /openapi.yaml.
func OpenAPI() string { return openAPI }
