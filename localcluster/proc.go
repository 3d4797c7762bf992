package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// Dir is the directory of the configs, addr files and logs (n<i>.log).
func (c *Cluster) Dir() string { return c.dir }

// LogTail is the last few KiB of node i's output.
func (c *Cluster) LogTail(i int) string {
	if p := c.proc(i); p != nil {
		return p.tail.String()
	}
	return ""
}

// PID is the process id of node i's current process (0 if there is no
// node i or it has not started): for measuring its CPU time
// (bench/peers reads /proc/<pid>/stat).
func (c *Cluster) PID(i int) int {
	if p := c.proc(i); p != nil && p.cmd != nil && p.cmd.Process != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Alive reports whether node i's process is running.
func (c *Cluster) Alive(i int) bool {
	p := c.proc(i)
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to node i (a crash: no graceful leave) and reaps it.
// Killing a node that already exited is not an error.
func (c *Cluster) Kill(i int) error {
	p, err := c.index(i)
	if err != nil {
		return err
	}
	p.kill()
	<-p.done
	c.dropConn(i)
	return nil
}

// Terminate sends SIGTERM to node i and waits for it to exit (it leaves
// the gossip cluster gracefully); after 10 s it is killed and Terminate
// fails. A non-zero exit status is an error; a node that already exited is
// not.
func (c *Cluster) Terminate(i int) error {
	p, err := c.index(i)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	defer c.dropConn(i)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("localcluster: node %s after SIGTERM: %v\n--- log tail ---\n%s", p.name, p.err, p.tail.String())
		}
		return nil
	case <-time.After(stopGrace):
		p.kill()
		<-p.done
		return fmt.Errorf("localcluster: node %s still running %v after SIGTERM; killed", p.name, stopGrace)
	}
}

// kill SIGKILLs the process and its group.
// exited reports whether the process has exited (its Wait returned).
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	if pid := p.cmd.Process.Pid; pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // the group (Setpgid: pgid == pid)
	}
	_ = p.cmd.Process.Kill()
}

// Stop sends SIGTERM to every live node, waits for them (SIGKILL after
// 10 s), closes the gRPC connections of Client, and removes Dir if Start
// made it. It is idempotent. Errors: a node that exited with a non-zero
// status or had to be killed, a failure to remove the directory.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	procs := append([]*proc(nil), c.procs...)
	conns := c.conns
	c.conns = map[int]*grpc.ClientConn{}
	c.mu.Unlock()
	for _, cc := range conns {
		_ = cc.Close()
	}
	var live []*proc
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			live = append(live, p)
		}
	}
	var errs []error
	deadline := time.NewTimer(stopGrace)
	defer deadline.Stop()
	for _, p := range live {
		select {
		case <-p.done:
			if p.err != nil {
				errs = append(errs, fmt.Errorf("localcluster: node %s exited after SIGTERM: %v\n--- log tail ---\n%s", p.name, p.err, p.tail.String()))
			}
		case <-deadline.C:
			// Kill every one still running; later iterations find them done.
			for _, q := range live {
				q.kill()
			}
			<-p.done
			errs = append(errs, fmt.Errorf("localcluster: node %s still running %v after SIGTERM; killed", p.name, stopGrace))
		}
	}
	for _, p := range live {
		<-p.done
	}
	if c.lab != nil {
		if err := c.lab.Close(); err != nil {
			errs = append(errs, fmt.Errorf("localcluster: %w", err))
		}
	}
	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("localcluster: %w", err))
		}
	}
	return errors.Join(errs...)
}

// tail keeps the last tailBytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// prefixer writes whole lines to w, each prefixed, under mu (shared by
// every node's prefixer). A write error of w is ignored: the node's
// output must not stall on it.
type prefixer struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string

	pmu     sync.Mutex
	partial []byte
}

func (p *prefixer) Write(b []byte) (int, error) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	p.partial = append(p.partial, b...)
	var out []byte
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		out = append(out, p.prefix...)
		out = append(out, p.partial[:i+1]...)
		p.partial = p.partial[i+1:]
	}
	if len(p.partial) > 64<<10 { // a runaway line: write what there is
		out = append(append(append(out, p.prefix...), p.partial...), '\n')
		p.partial = nil
	}
	p.partial = append([]byte(nil), p.partial...)
	if len(out) > 0 {
		p.mu.Lock()
		_, _ = p.w.Write(out)
		p.mu.Unlock()
	}
	return len(b), nil
}

// flush writes an unterminated last line.
func (p *prefixer) flush() {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if len(p.partial) == 0 {
		return
	}
	out := append(append([]byte(p.prefix), p.partial...), '\n')
	p.partial = nil
	p.mu.Lock()
	_, _ = p.w.Write(out)
	p.mu.Unlock()
}
