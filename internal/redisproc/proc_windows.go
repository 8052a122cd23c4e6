package redisproc

import "os/exec"

// detach does nothing on Windows, which has neither process groups that a
// Ctrl-C reaches as a whole nor a parent-death signal.
func detach(*exec.Cmd) {}
