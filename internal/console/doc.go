// Package console is Leasehold's web console: plain HTML, CSS and ES
// modules, embedded in the binary and served by the API at /ui/ (see
// httpapi). There is no build step; the browser loads the files as they
// are in assets/.
//
// The console is a client of the public API and nothing else: it calls
// /v1/... with the API key the operator typed in, kept in the tab's
// sessionStorage, and follows a job's events with fetch and the
// Authorization header (an EventSource cannot send one), parsing the
// server-sent events itself and resuming with Last-Event-ID when a stream
// drops.
//
// # Hostile content
//
// A job's result, error, metadata and output come from tenants. The
// console puts them on the page as text only: every element is built with
// document.createElement and text with textContent (assets/dom.js); no
// script uses innerHTML, insertAdjacentHTML or document.write. The server
// backs this with a Content-Security-Policy (Policy) that allows scripts,
// styles and connections from the console's own origin only, no inline
// script or style, no plugins, and no framing.
package console

import (
	"embed"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// Policy is the Content-Security-Policy of every console response: only
// the console's own files run, and nothing inline, so text that a tenant
// managed to get parsed as markup still could not execute.
const Policy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Files returns the console's files, index.html at the root.
func Files() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above: unreachable
	}
	return sub
}
