package redisproc

import (
	"os/exec"
	"syscall"
)

// detach puts cmd in a process group of its own, so the Ctrl-C a terminal
// sends to its foreground group reaches only the parent, which stops the
// server last, after everything that uses it; and has the kernel kill cmd
// when the thread that starts it exits.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
