package netns

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func newLab(t *testing.T, n int) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := New(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// echo listens in host i and answers every connection with "ok".
func echo(t *testing.T, l *Lab, i int) string {
	t.Helper()
	ln, err := l.Listen(i, "tcp", l.Hosts[i].Addr.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// reach reports whether host from gets "ok" from addr within 2 s.
func reach(l *Lab, from int, addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := l.Dial(ctx, from, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 2)
	n, _ := c.Read(b)
	return string(b[:n]) == "ok"
}

func TestCutAndHeal(t *testing.T) {
	l := newLab(t, 3)
	a1 := echo(t, l, 1)
	a0 := echo(t, l, 0)
	if !reach(l, 0, a1) || !reach(l, 2, a1) || !reach(l, 1, a0) {
		t.Fatal("hosts cannot reach each other before any cut")
	}
	ctx := context.Background()
	if err := l.Cut(ctx, []int{0}, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	if reach(l, 0, a1) || reach(l, 1, a0) {
		t.Error("0 and 1 still reach each other across the cut")
	}
	if !reach(l, 2, a1) {
		t.Error("2 cannot reach 1 on the same side of the cut")
	}
	if got := strings.Join(l.Cuts(), " "); got != "0->1 0->2 1->0 2->0" {
		t.Errorf("Cuts %q", got)
	}
	if err := l.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !reach(l, 0, a1) || !reach(l, 1, a0) {
		t.Error("0 and 1 cannot reach each other after the heal")
	}
	// DialContext reaches a host from its own namespace, across cuts.
	if err := l.Cut(ctx, []int{0}, []int{1}); err != nil {
		t.Fatal(err)
	}
	c, err := l.DialContext(ctx, "tcp", a1)
	if err != nil {
		t.Fatalf("DialContext %s across a cut: %v", a1, err)
	}
	c.Close()
	if _, err := l.DialContext(ctx, "tcp", "192.0.2.1:80"); err == nil {
		t.Error("DialContext to an address outside the lab succeeded")
	}
	if err := l.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if len(l.Cuts()) != 0 {
		t.Errorf("Cuts %v after the heal", l.Cuts())
	}
}

func TestCutOneWay(t *testing.T) {
	l := newLab(t, 2)
	a1 := echo(t, l, 1)
	a0 := echo(t, l, 0)
	if err := l.CutOneWay(context.Background(), []int{0}, []int{1}); err != nil {
		t.Fatal(err)
	}
	// TCP needs both directions: neither side connects.
	if reach(l, 0, a1) || reach(l, 1, a0) {
		t.Error("a TCP connection crossed a one-way cut")
	}
	// UDP from 1 still reaches 0.
	pc, err := listenUDP(l, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := l.Dial(context.Background(), 1, "udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 8)
	if n, _, err := pc.ReadFrom(b); err != nil || string(b[:n]) != "hi" {
		t.Errorf("UDP 1->0 across a cut 0->1: %q, %v", b[:n], err)
	}
}

func listenUDP(l *Lab, i int) (net.PacketConn, error) {
	var pc net.PacketConn
	err := l.in(i, func() error {
		var err error
		pc, err = net.ListenPacket("udp", l.Hosts[i].Addr.String()+":0")
		return err
	})
	return pc, err
}

func TestCommandRunsInHost(t *testing.T) {
	l := newLab(t, 2)
	out, err := l.Command(context.Background(), 1, "ip", "-brief", "addr", "show", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), l.Hosts[1].Addr.String()+"/24") {
		t.Errorf("eth0 in host 1: %s", out)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	l, err := New(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Cut(context.Background(), []int{0}, []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), l.prefix) {
		t.Errorf("namespaces of the closed lab remain:\n%s", out)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	if _, err := New(context.Background(), 0); err == nil {
		t.Error("New(0) succeeded")
	}
	l := newLab(t, 1)
	if err := l.Cut(context.Background(), []int{0}, []int{5}); err == nil || !strings.Contains(err.Error(), "no host 5") {
		t.Errorf("Cut to host 5: %v", err)
	}
	if _, err := l.Dial(context.Background(), 3, "tcp", "10.251.0.1:1"); err == nil {
		t.Error("Dial from host 3 succeeded")
	}
}
