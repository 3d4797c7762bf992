package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestSlowClientsCut: clients that trickle a request's headers or body, one
// byte at a time, have their connection closed by the server once the read
// timeouts pass, and the goroutines they held are released.
func TestSlowClientsCut(t *testing.T) {
	srv := NewHTTPServer(newTestServer(t).Handler(), Timeouts{ReadHeader: 300 * time.Millisecond, Read: 800 * time.Millisecond,
		Write: time.Second, Idle: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	before := runtime.NumGoroutine()

	const clients = 40
	type result struct {
		held time.Duration
		err  error
	}
	results := make(chan result, clients)
	for i := range clients {
		go func() {
			results <- trickle(ln.Addr().String(), i%2 == 0)
		}()
	}
	for range clients {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		// Read timeout 800ms (+ the trickle step and scheduling on a busy
		// 2-core machine); the clients would go on for 10 s.
		if r.held > 3*time.Second {
			t.Errorf("a slow client held its connection %v; the server's read timeout is 800ms", r.held)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Errorf("%d goroutines after the slow clients were cut, %d before", n, before)
	}
}

// trickle connects to addr and sends a check request one byte every 100ms
// (the headers first; with body, complete headers at once and then the
// body byte by byte), for at most 10 s, and returns how long the
// connection stayed open. An error: the connection was still open after
// 10 s, or something else failed.
func trickle(addr string, body bool) (r struct {
	held time.Duration
	err  error
}) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		r.err = err
		return
	}
	defer c.Close()
	start := time.Now()
	head := "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
	var slow string
	if body {
		if _, err := io.WriteString(c, head); err != nil {
			r.err = err
			return
		}
		slow = `{"checks":[{"rule":"api","key":"k","hits":1}]}` + fmt.Sprintf("%150s", "")
	} else {
		slow = head
	}
	closed := make(chan struct{})
	go func() { // the server's answer (if any) and its close
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			close(closed)
		}
	}()
	for i := 0; i < len(slow); i++ {
		select {
		case <-closed:
			r.held = time.Since(start)
			return
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := c.Write([]byte{slow[i]}); err != nil { // the server closed it
			r.held = time.Since(start)
			return
		}
		if time.Since(start) > 10*time.Second {
			break
		}
	}
	select {
	case <-closed:
		r.held = time.Since(start)
	case <-time.After(10 * time.Second):
		r.err = fmt.Errorf("the server kept a slow connection open for %v", time.Since(start))
	}
	return
}
