package localcluster

import "syscall"

// sysProcAttr puts the child in its own process group and asks the kernel
// to SIGKILL it when the parent dies (Pdeathsig): a crashed or timed-out
// test leaves no node running. (Linux sends it when the forking OS thread
// exits; the Go runtime ends threads only when a goroutine exits while
// locked to one with runtime.LockOSThread, so do not call Start from such
// a goroutine.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
