// This file holds DieWithTest: a process a test starts is killed when the test's process
// ends, however it ends (a test binary killed by its timeout, by a signal, or by hand runs no
// cleanup, and its simulators, NATS nodes and exporters went on: one left a simulator spinning
// at a core, under the next benchmark).

package testutil

import (
	"os/exec"
	"syscall"
)

// DieWithTest asks the kernel to kill cmd's process (SIGKILL) when the test's process ends. Call
// it before cmd.Start. (The kernel sends it when the thread that started cmd ends: Go's threads
// end with the process, as long as no goroutine that locked one starts processes.)
func DieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
