package redisproc

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when the thread that starts it exits.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
