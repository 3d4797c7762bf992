package workload

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// checkRead checks what Read returned for fuzzed input: never both a trace and an error,
// a well-formed trace, and a *LineError (or a no-requests error) on failure.
func checkRead(t *testing.T, tr *Trace, err error, skipBad bool) {
	t.Helper()
	if err != nil {
		if tr != nil {
			t.Fatalf("trace and error %v", err)
		}
		var le *LineError
		if !skipBad && !errors.As(err, &le) && !strings.Contains(err.Error(), "no requests in") &&
			!strings.Contains(err.Error(), "reading") {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if le != nil && (le.Line < 1 || le.Reason == "" || le.File != "fuzz") {
			t.Fatalf("bad LineError %+v", le)
		}
		return
	}
	if len(tr.Requests) == 0 {
		t.Fatal("empty trace without error")
	}
	checkTrace(t, tr, true)
	if !skipBad && tr.Skipped != 0 {
		t.Fatalf("Skipped %d without SkipBad", tr.Skipped)
	}
}

func FuzzReadCSV(f *testing.F) {
	for _, s := range []string{
		"ts_ms,key\n0,a\n5,b\n",
		"ts_ms,key,tokens\n1700000000000,a,3\n1700000000001,b,1\n",
		"2000,a\n1000,b\n1000,c\n",
		"0,\"a,b\"\n1,\"x\"\"y\"\n",
		"\uFEFF0,a\r\n\r\n-1,b\nabc,c\n5,d,0\n5,d,1,1\n",
		"9223372036854,a\n0,b\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, skipBad bool) {
		tr, err := Read(bytes.NewReader(data), "fuzz", ReadOptions{Format: "csv", SkipBad: skipBad})
		checkRead(t, tr, err, skipBad)
		// Auto-detection must not panic either.
		tr, err = Read(bytes.NewReader(data), "fuzz", ReadOptions{SkipBad: skipBad})
		if err == nil {
			checkTrace(t, tr, true)
		}
	})
}

func FuzzReadCLF(f *testing.F) {
	for _, s := range []string{
		clfLine + "\n",
		`10.0.0.2 - - [10/Oct/2000:22:55:37 +0200] "POST /login?a=b HTTP/1.1" 302 - "http://x/" "Mozilla/5.0"` + "\n" + clfLine,
		`1.2.3.4 - - [10/Oct/2000`,
		`1.2.3.4 - u [10/Oct/2000:13:55:36 -0700] "GET /q\"x HTTP/1.0" 404 -`,
		`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "-" 408 -`,
		`a b c [01/Jan/1970:00:00:00 +0000] "" 200 0`,
	} {
		for key := range uint8(3) {
			f.Add([]byte(s), false, key)
		}
		f.Add([]byte(s), true, uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, skipBad bool, key uint8) {
		opt := ReadOptions{Format: "clf", SkipBad: skipBad, Key: []string{"host", "user", "path"}[key%3]}
		tr, err := Read(bytes.NewReader(data), "fuzz", opt)
		checkRead(t, tr, err, skipBad)
		opt.Format = ""
		tr, err = Read(bytes.NewReader(data), "fuzz", opt)
		if err == nil {
			checkTrace(t, tr, true)
		}
	})
}

func FuzzParseGenerator(f *testing.F) {
	for _, s := range []string{
		"poisson", "poisson:users=100,rate=0.5,duration=60s,seed=1", "periodic:period=250ms,jitter=10ms",
		"batch:users=3,rate=0.2,size=20", "heavy:s=0", "mix:duration=5s", "mix:", "poisson:users=0",
		"heavy:users=1,rate=1e-9", "periodic:jitter=60s,period=1ms,users=1",
	} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, spec string, seed uint64) {
		g, err := ParseGenerator(spec)
		if err != nil {
			if g != nil || !strings.HasPrefix(err.Error(), "workload: ") {
				t.Fatalf("bad failure: %v %v", g, err)
			}
			return
		}
		again, err := ParseGenerator(g.String())
		if err != nil || again.String() != g.String() {
			t.Fatalf("%q -> %q does not round-trip: %v", spec, g.String(), err)
		}
		gs := g.(*genSpec)
		if gs.expected() > 20000 {
			return // valid, but too big to generate on every fuzz iteration
		}
		tr := g.Generate(seed)
		checkTrace(t, tr, false)
		if n := len(tr.Requests); n > 0 && tr.Requests[n-1].Arrival >= gs.duration {
			t.Fatalf("%s: request at %v, duration %v", g, tr.Requests[n-1].Arrival, gs.duration)
		}
	})
}
