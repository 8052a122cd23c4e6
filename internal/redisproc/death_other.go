//go:build !linux

package redisproc

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// a server whose process died without stopping it keeps running there.
func dieWithParent(*exec.Cmd) {}
