//go:build unix && !linux

package localcluster

import "syscall"

// sysProcAttr puts the child in its own process group. Without Linux's
// Pdeathsig, nodes outlive a parent that dies without calling Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
