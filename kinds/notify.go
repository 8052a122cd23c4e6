package kinds

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// NotifyAllow says where a sleep job's notify_url may point: URLs that
// start with one of Prefixes, and with Loopback any http(s) URL on
// localhost or a loopback address (the dev mode's setting). The zero value
// allows nothing. LEASEHOLD_NOTIFY_ALLOW sets Prefixes (ParseNotifyAllow).
//
// A prefix matches at a boundary: https://hooks.example.com allows
// https://hooks.example.com/a but not https://hooks.example.com.evil.net,
// and https://h.example/api allows /api/x but not /api-admin. A URL with a
// user name, a fragment or a dot segment (/api/../admin) is never allowed.
type NotifyAllow struct {
	Prefixes []string
	Loopback bool
}

// ParseNotifyAllow reads comma-separated http(s) URL prefixes.
func ParseNotifyAllow(s string) (NotifyAllow, error) {
	var a NotifyAllow
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		u, ok := parseNotifyURL(p)
		if !ok || u.RawQuery != "" {
			return NotifyAllow{}, fmt.Errorf("notify allow %q: want an http:// or https:// URL prefix with a host, such as https://hooks.example.com/leasehold/", p)
		}
		a.Prefixes = append(a.Prefixes, normalURL(u))
	}
	return a, nil
}

// Allows reports whether raw may be called.
func (a NotifyAllow) Allows(raw string) bool {
	u, ok := parseNotifyURL(raw)
	if !ok {
		return false
	}
	if a.Loopback && isLoopback(u.Hostname()) {
		return true
	}
	s := normalURL(u)
	return slices.ContainsFunc(a.Prefixes, func(p string) bool {
		rest, ok := strings.CutPrefix(s, p)
		return ok && (rest == "" || strings.HasSuffix(p, "/") || strings.ContainsRune("/?", rune(rest[0])))
	})
}

// parseNotifyURL accepts an absolute http(s) URL with a host, no user
// info, no fragment and no dot segment.
func parseNotifyURL(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" ||
		u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return nil, false
	}
	for seg := range strings.SplitSeq(u.Path, "/") {
		if seg == "." || seg == ".." {
			return nil, false
		}
	}
	return u, true
}

// normalURL writes u with its host in lower case, so that the prefixes
// compare as the request will be made.
func normalURL(u *url.URL) string {
	s := u.Scheme + "://" + strings.ToLower(u.Host) + u.EscapedPath()
	if u.RawQuery != "" {
		s += "?" + u.RawQuery
	}
	return s
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
