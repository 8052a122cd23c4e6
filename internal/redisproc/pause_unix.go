//go:build unix

package redisproc

import "syscall"

// Pause stops the process (SIGSTOP): it holds its connections and answers
// nothing until Resume. A paused replica receives no writes.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	return cmd.Process.Signal(sig)
}
