//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockData takes the data directory dir for this process alone, with an
// flock on its lock file, which says who holds it (pid and API address).
// Another holder is an error naming it. The kernel releases the lock when
// the process ends, however it ends (a kill -9 included), so a crash never
// leaves a stale lock. The file is opened close-on-exec: the redis-server
// child does not hold it.
func lockData(dir, api string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another leasehold dev (%s) is using %s: stop it first, or give this one another --data",
				strings.TrimSpace(string(holder)), dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = fmt.Fprintf(f, "pid %d, API at %s\n", os.Getpid(), api)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
