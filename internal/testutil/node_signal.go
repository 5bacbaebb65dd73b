// This file holds what the durability suite (e2e) does to a cluster node beyond a clean stop:
// kill -9, pausing it (SIGSTOP) and waking it (SIGCONT), and its pid.

package testutil

import (
	"fmt"
	"syscall"
)

// Kill ends a cluster node with SIGKILL, keeping its store, as a crash or a power cut of the
// process does (a no-op while stopped); Start runs it again. Embedded servers cannot be killed.
func (n *NATS) Kill() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node == nil {
		n.t.Fatal("Kill: only a cluster node runs in a process of its own")
	}
	if n.node.cmd == nil {
		return
	}
	_ = n.node.cmd.Process.Signal(syscall.SIGCONT) // a paused node dies too
	_ = n.node.cmd.Process.Kill()
	<-n.node.done
	n.node.cmd = nil
}

// Signal sends sig (SIGSTOP, SIGCONT) to a running cluster node's process.
func (n *NATS) Signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node == nil || n.node.cmd == nil {
		return fmt.Errorf("%s is not a running cluster node", n.opts.ServerName)
	}
	return n.node.cmd.Process.Signal(sig)
}

// Pid is the process id of a running cluster node (0 while stopped or embedded): what a
// benchmark reads the node's CPU time and memory from.
func (n *NATS) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node == nil || n.node.cmd == nil {
		return 0
	}
	return n.node.cmd.Process.Pid
}
