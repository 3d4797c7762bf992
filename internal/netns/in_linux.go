package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// in runs f on an OS thread switched into host i's namespace, then
// switches the thread back. Sockets f creates stay in that namespace. If
// the thread cannot be switched back it is not returned to the runtime
// (the goroutine exits locked, which retires the thread).
func (l *Lab) in(i int, f func() error) error {
	if err := l.check([]int{i}); err != nil {
		return err
	}
	target, err := os.Open("/run/netns/" + l.Hosts[i].Namespace)
	if errors.Is(err, os.ErrNotExist) {
		target, err = os.Open("/var/run/netns/" + l.Hosts[i].Namespace)
	}
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: setns %s: %w", l.Hosts[i].Namespace, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("netns: setns back: %w", err))
			return // still locked: the thread is retired
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
