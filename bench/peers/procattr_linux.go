package main

import "syscall"

// procAttr: a new process group (a Ctrl-C reaches this process, which
// stops the servers in order), killed by the kernel if this process dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
