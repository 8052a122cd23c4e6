package httpapi

import (
	"bytes"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/console"
)

// toConsole answers GET / with a redirect to the console: the API's address,
// opened in a browser, leads somewhere.
func toConsole(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusFound)
}

// serveConsole serves the web console's files at /ui/, index.html for
// /ui/ itself. The files are embedded, so a request that names no file is
// the 404 of an unknown path. Every answer carries the console's
// Content-Security-Policy and forbids MIME sniffing and framing.
func serveConsole(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", console.Policy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY") // frame-ancestors, for browsers that predate it
	h.Set("Referrer-Policy", "no-referrer")
	name := strings.TrimPrefix(r.URL.Path, "/ui/")
	if name == "" {
		name = "index.html"
	}
	body, err := fs.ReadFile(console.Files(), name)
	if err != nil || strings.Contains(name, "/") { // the files are flat: no directory listings
		notFound(w, r)
		return
	}
	// Revalidate every time: the files change with the binary, and they
	// are small.
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}
