//go:build unix && !linux

package redisproc

import (
	"os/exec"
	"syscall"
)

// detach puts cmd in a process group of its own, so the Ctrl-C a terminal
// sends to its foreground group reaches only the parent, which stops the
// server last. There is no parent-death signal here: a server whose
// process died without stopping it keeps running.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
