package testenv

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what several goroutines write (a logger, a process under
// test) for a test to read: a bytes.Buffer behind a mutex, since the race
// detector cannot see the order an HTTP round trip or a channel gives them.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far that contain every one of words.
func (b *Buffer) Lines(words ...string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}
