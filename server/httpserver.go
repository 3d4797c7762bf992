package server

import (
	"net/http"
	"time"
)

// Timeouts of the HTTP/JSON API server (net/http.Server's fields). A slow
// client cannot hold a connection (and its goroutine and buffers) longer
// than these: a request's headers must arrive within ReadHeader, the
// whole request (body included) within Read, the answer must be written
// within Write of the end of the headers, and an idle keep-alive
// connection is closed after Idle.
type Timeouts struct {
	ReadHeader time.Duration
	Read       time.Duration
	Write      time.Duration
	Idle       time.Duration
}

// Defaults of Timeouts' zero fields: a check's request is a few hundred
// bytes and is answered in milliseconds, so these leave a wide margin for
// slow networks while bounding what a client that trickles its request
// (one byte every few seconds) can hold.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
)

// NewHTTPServer returns an http.Server for h with the timeouts set (zero
// fields of t take the defaults above). The caller sets TLSConfig and
// calls Serve.
func NewHTTPServer(h http.Handler, t Timeouts) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: or(t.ReadHeader, DefaultReadHeaderTimeout),
		ReadTimeout:       or(t.Read, DefaultReadTimeout),
		WriteTimeout:      or(t.Write, DefaultWriteTimeout),
		IdleTimeout:       or(t.Idle, DefaultIdleTimeout),
	}
}
