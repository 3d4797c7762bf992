package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"
)

const ms = time.Millisecond

// reqs is a compact way to write expected requests: arrival ms, key, tokens.
type rq struct {
	ms     int64
	key    string
	tokens int64
}

func toRq(t *Trace) []rq {
	out := make([]rq, len(t.Requests))
	for i, r := range t.Requests {
		out[i] = rq{int64(r.Arrival / ms), r.Key, r.Tokens}
	}
	return out
}

func eqRq(a, b []rq) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReadCSV(t *testing.T) {
	tests := []struct {
		name, in string
		want     []rq
	}{
		{"header", "ts_ms,key\n0,a\n5,b\n", []rq{{0, "a", 1}, {5, "b", 1}}},
		{"no header", "10,a\n15,b\n", []rq{{0, "a", 1}, {5, "b", 1}}},
		{"tokens header", "ts_ms,key,tokens\n0,a,3\n7,b,1\n", []rq{{0, "a", 3}, {7, "b", 1}}},
		{"tokens without header", "0,a,3\n7,b\n", []rq{{0, "a", 3}, {7, "b", 1}}},
		{"absolute epoch start", "1700000000000,a\n1700000000250,b\n", []rq{{0, "a", 1}, {250, "b", 1}}},
		{"empty lines, CRLF, BOM, no final newline", "\uFEFFts_ms,key\r\n\r\n0,a\r\n   \n\t\n3,b", []rq{{0, "a", 1}, {3, "b", 1}}},
		{"spaces around fields", " 0 , a , 2 \n", []rq{{0, "a", 2}}},
		{"quoted fields", "\"ts_ms\",\"key\"\n0,\"a,b\"\n1,\"say \"\"hi\"\"\"\n\"2\",c\n", []rq{{0, "a,b", 1}, {1, `say "hi"`, 1}, {2, "c", 1}}},
		{"leading zeros", "007,a\n", []rq{{0, "a", 1}}},
		{"header with spaces", "ts_ms , key\n1,a\n", []rq{{0, "a", 1}}},
		{"quoted first ts", "\"7\",a\n", []rq{{0, "a", 1}}},
		{"out of order sorted stably", "2000,a\n1000,b\n1000,c\n3000,d\n1000,e\n2000,f\n",
			[]rq{{0, "b", 1}, {0, "c", 1}, {0, "e", 1}, {1000, "a", 1}, {1000, "f", 1}, {2000, "d", 1}}},
		{"equal times keep file order", "5,z\n5,y\n5,x\n", []rq{{0, "z", 1}, {0, "y", 1}, {0, "x", 1}}},
		{"max ts", "0,a\n9223372036854,b\n", []rq{{0, "a", 1}, {9223372036854, "b", 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, format := range []string{"", "auto", "csv"} {
				tr, err := Read(strings.NewReader(tc.in), "t.csv", ReadOptions{Format: format})
				if err != nil {
					t.Fatalf("format %q: %v", format, err)
				}
				if got := toRq(tr); !eqRq(got, tc.want) {
					t.Errorf("format %q: got %v, want %v", format, got, tc.want)
				}
				if tr.Name != "t.csv" || tr.Skipped != 0 || tr.SkippedExamples != nil {
					t.Errorf("format %q: Name %q Skipped %d %v", format, tr.Name, tr.Skipped, tr.SkippedExamples)
				}
			}
		})
	}
}

func TestReadCSVLineErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0,a\nabc,b\n", `trace.csv:2: ts_ms "abc" is not a whole number of milliseconds`},
		{"0,a\n1.5,b\n", `trace.csv:2: ts_ms "1.5" is not a whole number of milliseconds`},
		{"0,a\n-5,b\n", `trace.csv:2: ts_ms "-5" is negative`},
		{"0,a\n,b\n", `trace.csv:2: ts_ms "" is not a whole number of milliseconds`},
		{"0,a\n99999999999999999999,b\n", `trace.csv:2: ts_ms "99999999999999999999" is too large (max 9223372036854)`},
		{"0,a\n9223372036855,b\n", `trace.csv:2: ts_ms "9223372036855" is too large (max 9223372036854)`},
		{"ts_ms,key\n0,a\n\n7\n", `trace.csv:4: missing key: want ts_ms,key[,tokens]`},
		{"0,a\n7,\n", `trace.csv:2: empty key`},
		{"0,a\n7, \n", `trace.csv:2: empty key`},
		{"0,a\n7,b,0\n", `trace.csv:2: tokens "0" is not a positive whole number`},
		{"0,a\n7,b,-1\n", `trace.csv:2: tokens "-1" is not a positive whole number`},
		{"0,a\n7,b,x\n", `trace.csv:2: tokens "x" is not a positive whole number`},
		{"0,a\n7,b,\n", `trace.csv:2: tokens "" is not a positive whole number`},
		{"0,a\n7,b,99999999999999999999\n", `trace.csv:2: tokens "99999999999999999999" is too large (max 9223372036854775807)`},
		{"0,a\n7,b,1,x\n", `trace.csv:2: too many fields: want ts_ms,key[,tokens]`},
		{"0,a\n7,\"b\n", `trace.csv:2: unterminated quoted field`},
		{"0,a\n7,\"b\"c\n", `trace.csv:2: unexpected text "c" after a quoted field`},
		{"ts_ms,key\n0,a\nts_ms,key\n", `trace.csv:3: header "ts_ms,key" after the first line`},
		{"ts_ms,user\n0,a\n", `trace.csv:1: header "ts_ms,user" is not ts_ms,key or ts_ms,key,tokens`},
		{"ts_ms,key,tokens,x\n0,a\n", `trace.csv:1: header "ts_ms,key,tokens,x" is not ts_ms,key or ts_ms,key,tokens`},
		{"0,a\nnot a number at all, really long and more than sixty bytes of text, to see it cut\n",
			`trace.csv:2: ts_ms "not a number at all" is not a whole number of milliseconds`},
	}
	for _, tc := range tests {
		_, err := Read(strings.NewReader(tc.in), "trace.csv", ReadOptions{Format: "csv"})
		var le *LineError
		if !errors.As(err, &le) {
			t.Errorf("%q: got error %v, want a *LineError", tc.in, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.in, err, tc.want)
		}
	}
}

func TestQuoteShortens(t *testing.T) {
	long := strings.Repeat("x", 100)
	if got, want := quote([]byte(long)), `"`+strings.Repeat("x", 60)+`"...`; got != want {
		t.Errorf("quote = %s, want %s", got, want)
	}
}

const clfLine = `127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" 200 2326`

func TestReadCLF(t *testing.T) {
	in := clfLine + "\n" +
		// Combined format, other offset: 22:55:37 +0200 is 20:55:37Z, 1 s after the first.
		`10.0.0.2 - - [10/Oct/2000:22:55:37 +0200] "POST /login HTTP/1.1" 302 - "http://x/" "Mozilla/5.0 (X11)"` + "\n" +
		"\n" +
		// Escaped quote in the request, bytes "-".
		`10.0.0.3 - bob [10/Oct/2000:20:55:36 +0000] "GET /q\"x HTTP/1.0" 404 -` + "\n" +
		// Earlier than the first line: becomes the start of the trace.
		`10.0.0.4 - - [10/oct/2000:20:55:35 +0000] "GET / HTTP/1.0" 200 1 extra fields here` + "\n"
	tests := []struct {
		key  string
		want []rq
	}{
		{"", []rq{{0, "10.0.0.4", 1}, {1000, "127.0.0.1", 1}, {1000, "10.0.0.3", 1}, {2000, "10.0.0.2", 1}}},
		{"host", []rq{{0, "10.0.0.4", 1}, {1000, "127.0.0.1", 1}, {1000, "10.0.0.3", 1}, {2000, "10.0.0.2", 1}}},
		{"user", []rq{{0, "-", 1}, {1000, "frank", 1}, {1000, "bob", 1}, {2000, "-", 1}}},
		{"path", []rq{{0, "/", 1}, {1000, "/apache_pb.gif", 1}, {1000, `/q\"x`, 1}, {2000, "/login", 1}}},
	}
	for _, tc := range tests {
		for _, format := range []string{"auto", "clf"} {
			tr, err := Read(strings.NewReader(in), "access.log", ReadOptions{Format: format, Key: tc.key})
			if err != nil {
				t.Fatalf("key %q format %s: %v", tc.key, format, err)
			}
			if got := toRq(tr); !eqRq(got, tc.want) {
				t.Errorf("key %q format %s: got %v, want %v", tc.key, format, got, tc.want)
			}
		}
	}
}

func TestReadCLFLineErrors(t *testing.T) {
	tests := []struct {
		line, key, want string
	}{
		{`1.2.3.4 - - [10/Oct/2000`, "", `access.log:2: timestamp "[10/Oct/2000" has no closing ]`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700 "GET / HTTP/1.0" 200 1`, "", `access.log:2: timestamp "[10/Oct/2000:13:55:36 -0700" has no closing ]`},
		{`1.2.3.4 - - [10/Okt/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "", `access.log:2: timestamp "10/Okt/2000:13:55:36 -0700" is not dd/Mon/yyyy:hh:mm:ss +hhmm`},
		{`1.2.3.4 - - [31/Feb/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "", `access.log:2: timestamp "31/Feb/2000:13:55:36 -0700" is not dd/Mon/yyyy:hh:mm:ss +hhmm`},
		{`1.2.3.4 - - [10/Oct/1969:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "", `access.log:2: timestamp "10/Oct/1969:13:55:36 -0700" is before 1970`},
		{`1.2.3.4 - - [10/Oct/2300:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "", `access.log:2: timestamp "10/Oct/2300:13:55:36 -0700" is after 2262`},
		{`1.2.3.4 - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "", `access.log:2: expected [timestamp] after the authuser field, found "-0700] \"GET / HTTP/1.0\" 200 1"`},
		{`1.2.3.4`, "", `access.log:2: only 1 fields before the timestamp: want host ident authuser [dd/Mon/yyyy:hh:mm:ss +hhmm] "request" status bytes`},
		{` 1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "", `access.log:2: line starts with a space: want host ident authuser [dd/Mon/yyyy:hh:mm:ss +hhmm] "request" status bytes`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] GET / HTTP/1.0 200 1`, "", `access.log:2: expected "request" after the timestamp, found " GET / HTTP/1.0 200 1"`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0 200 1`, "", `access.log:2: request "\"GET / HTTP/1.0 200 1" has no closing quote`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0"`, "", `access.log:2: expected status and bytes after the request, found ""`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" OK 1`, "", `access.log:2: status "OK" is not a 3-digit number`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200`, "", `access.log:2: bytes "" is not a number or -`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1k`, "", `access.log:2: bytes "1k" is not a number or -`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "-" 408 -`, "path", `access.log:2: request "-" has no path`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET ?q HTTP/1.0" 200 1`, "path", `access.log:2: request "GET ?q HTTP/1.0" has no path`},
		{`1.2.3.4 -  [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1`, "user", `access.log:2: empty user field`},
	}
	for _, tc := range tests {
		in := clfLine + "\n" + tc.line + "\n"
		_, err := Read(strings.NewReader(in), "access.log", ReadOptions{Format: "clf", Key: tc.key})
		var le *LineError
		if !errors.As(err, &le) {
			t.Errorf("%q: got error %v, want a *LineError", tc.line, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.line, err, tc.want)
		}
		if le.File != "access.log" || le.Line != 2 {
			t.Errorf("%q: LineError %+v", tc.line, le)
		}
	}
}

func TestReadCLFTimestampCache(t *testing.T) {
	// The cache must not confuse equal text on different lines with different text.
	in := `a - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1
b - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1
c - - [10/Oct/2000:13:55:36 -0600] "GET / HTTP/1.0" 200 1
d - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1
`
	tr, err := Read(strings.NewReader(in), "x", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []rq{{0, "c", 1}, {3600000, "a", 1}, {3600000, "b", 1}, {3600000, "d", 1}}
	if got := toRq(tr); !eqRq(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestSkipBad(t *testing.T) {
	var b strings.Builder
	b.WriteString("ts_ms,key\n")
	for i := range 7 {
		b.WriteString("0,a\n")
		b.WriteString("x" + strings.Repeat("y", i) + ",b\n")
	}
	b.WriteString("5,c\n")
	in := b.String()
	if _, err := Read(strings.NewReader(in), "s.csv", ReadOptions{}); err == nil || err.Error() != `s.csv:3: ts_ms "x" is not a whole number of milliseconds` {
		t.Fatalf("without SkipBad: %v", err)
	}
	tr, err := Read(strings.NewReader(in), "s.csv", ReadOptions{SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 8 || tr.Skipped != 7 {
		t.Errorf("got %d requests, %d skipped; want 8 and 7", len(tr.Requests), tr.Skipped)
	}
	want := []string{
		`s.csv:3: ts_ms "x" is not a whole number of milliseconds`,
		`s.csv:5: ts_ms "xy" is not a whole number of milliseconds`,
		`s.csv:7: ts_ms "xyy" is not a whole number of milliseconds`,
		`s.csv:9: ts_ms "xyyy" is not a whole number of milliseconds`,
		`s.csv:11: ts_ms "xyyyy" is not a whole number of milliseconds`,
	}
	if strings.Join(tr.SkippedExamples, "\n") != strings.Join(want, "\n") {
		t.Errorf("SkippedExamples:\n%s\nwant\n%s", strings.Join(tr.SkippedExamples, "\n"), strings.Join(want, "\n"))
	}

	// Only bad lines: an error that says so.
	_, err = Read(strings.NewReader("0,a,0\n1,b,0\n"), "bad.csv", ReadOptions{SkipBad: true})
	if err == nil || err.Error() != "workload: no requests in bad.csv (2 bad lines skipped)" {
		t.Errorf("all bad: %v", err)
	}

	// CLF with bad lines.
	tr, err = Read(strings.NewReader(clfLine+"\ngarbage [x] \"y\n"+clfLine+"\n"), "a.log", ReadOptions{SkipBad: true})
	if err != nil || len(tr.Requests) != 2 || tr.Skipped != 1 {
		t.Fatalf("CLF SkipBad: %v %+v", err, tr)
	}
}

func TestLongLine(t *testing.T) {
	in := "0,a\n1," + strings.Repeat("k", maxLine+10) + "\n2,b\n"
	_, err := Read(strings.NewReader(in), "l.csv", ReadOptions{})
	if err == nil || err.Error() != "l.csv:2: line is longer than 1048576 bytes" {
		t.Fatalf("got %v", err)
	}
	tr, err := Read(strings.NewReader(in), "l.csv", ReadOptions{SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := toRq(tr); !eqRq(got, []rq{{0, "a", 1}, {2, "b", 1}}) || tr.Skipped != 1 {
		t.Errorf("got %v, skipped %d", got, tr.Skipped)
	}
	// A line just under the limit is fine, and line numbers continue correctly after it.
	in = "0," + strings.Repeat("k", maxLine-2) + "\nbad,x\n"
	_, err = Read(strings.NewReader(in), "l.csv", ReadOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), `l.csv:2: ts_ms "bad"`) {
		t.Fatalf("got %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		in   string
		opt  ReadOptions
		want string
	}{
		{"", ReadOptions{}, "workload: no requests in x"},
		{"\n\n  \n", ReadOptions{}, "workload: no requests in x"},
		{"ts_ms,key\n", ReadOptions{}, "workload: no requests in x"},
		{"hello world\n", ReadOptions{}, `workload: x: format not recognised from its first line "hello world": want csv ("ts_ms,key[,tokens]" rows) or clf (Common/Combined Log Format access log); set the format to csv or clf explicitly`},
		{"0,a\n", ReadOptions{Format: "json"}, `workload: unknown trace format "json" (want auto, csv or clf)`},
		{"0,a\n", ReadOptions{Key: "ip"}, `workload: unknown CLF key "ip" (want host, user or path)`},
		{"0,a\n", ReadOptions{Key: "path"}, `workload: x: the key option "path" applies to CLF traces only, and this trace is csv`},
		{"0,a\n", ReadOptions{Format: "clf"}, `x:1: only 1 fields before the timestamp: want host ident authuser [dd/Mon/yyyy:hh:mm:ss +hhmm] "request" status bytes`},
		{clfLine, ReadOptions{Format: "csv"}, `x:1: ts_ms "127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET /apache_"... is not a whole number of milliseconds`},
	}
	for _, tc := range tests {
		_, err := Read(strings.NewReader(tc.in), "x", tc.opt)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q %+v:\n got  %v\n want %s", tc.in, tc.opt, err, tc.want)
		}
	}
}

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGzip(t *testing.T) {
	in := "ts_ms,key\n0,a\n3,b\n"
	want := []rq{{0, "a", 1}, {3, "b", 1}}
	tr, err := Read(bytes.NewReader(gz(t, in)), "x", ReadOptions{})
	if err != nil || !eqRq(toRq(tr), want) {
		t.Fatalf("Read gzip: %v %v", err, tr)
	}
	dir := t.TempDir()
	// Gzip is detected by content: a .csv name holding gzip, a .gz name holding text.
	for name, data := range map[string][]byte{"plain.csv.gz": []byte(in), "zipped.csv": gz(t, in)} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tr, err := ReadFile(path, ReadOptions{})
		if err != nil || !eqRq(toRq(tr), want) {
			t.Fatalf("ReadFile %s: %v %v", name, err, tr)
		}
		if tr.Name != name {
			t.Errorf("Name = %q, want %q", tr.Name, name)
		}
	}
	// A bad line in a file names the path as given.
	path := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(path, gz(t, "0,a\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, ReadOptions{}); err == nil || err.Error() != path+":2: missing key: want ts_ms,key[,tokens]" {
		t.Errorf("got %v", err)
	}
	// Truncated gzip: an I/O error naming the input.
	data := gz(t, strings.Repeat("0,a\n", 1000))
	_, err = Read(bytes.NewReader(data[:len(data)/2]), "cut.gz", ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), "reading cut.gz") {
		t.Errorf("truncated gzip: %v", err)
	}
	// Gzip magic but no valid header.
	_, err = Read(bytes.NewReader([]byte{0x1f, 0x8b}), "magic.gz", ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), "reading magic.gz") {
		t.Errorf("bad gzip header: %v", err)
	}
}

func TestReadFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.csv")
	_, err := ReadFile(path, ReadOptions{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("got %v, want a not-exist error naming %s", err, path)
	}
}

func TestInterning(t *testing.T) {
	tr, err := Read(strings.NewReader("0,alpha\n1,beta\n2,alpha\n"), "x", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(tr.Requests[0].Key) != unsafe.StringData(tr.Requests[2].Key) {
		t.Error("equal keys do not share one string")
	}
	if tr.Keys() != 2 || tr.Span() != 2*ms {
		t.Errorf("Keys %d Span %v", tr.Keys(), tr.Span())
	}
	if c := tr.KeyCounts(); len(c) != 2 || c["alpha"] != 2 || c["beta"] != 1 {
		t.Errorf("KeyCounts %v", c)
	}
	var empty Trace
	if empty.Span() != 0 || empty.Keys() != 0 || len(empty.KeyCounts()) != 0 {
		t.Error("empty trace stats")
	}
}

// TestRealTraces checks the facts stated in shared/data/traces/README.md.
func TestRealTraces(t *testing.T) {
	tests := []struct {
		file          string
		records, keys int
		span          time.Duration
		top           int
	}{
		{"zanbil-2019-http.csv.gz", 100000, 3672, 2628 * time.Second, 2078},
		{"wrccdc-2018-dns.csv.gz", 26787, 77, 1269285 * ms, 4673},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("..", "..", "shared", "data", "traces", tc.file)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("real trace not available (%v); it lives outside the repo in shared/data/traces", err)
			}
			tr, err := ReadFile(path, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Requests) != tc.records || tr.Keys() != tc.keys || tr.Span() != tc.span || tr.Skipped != 0 {
				t.Errorf("got %d records, %d keys, span %v, %d skipped; want %d, %d, %v, 0",
					len(tr.Requests), tr.Keys(), tr.Span(), tr.Skipped, tc.records, tc.keys, tc.span)
			}
			top := 0
			for _, n := range tr.KeyCounts() {
				top = max(top, n)
			}
			if top != tc.top {
				t.Errorf("busiest key has %d requests, want %d", top, tc.top)
			}
			checkTrace(t, tr, true)
		})
	}
}

// checkTrace checks the invariants of every trace this package returns.
func checkTrace(t testing.TB, tr *Trace, startsAtZero bool) {
	t.Helper()
	if startsAtZero && len(tr.Requests) > 0 && tr.Requests[0].Arrival != 0 {
		t.Fatalf("first Arrival %v, want 0", tr.Requests[0].Arrival)
	}
	for i, r := range tr.Requests {
		if i > 0 && r.Arrival < tr.Requests[i-1].Arrival {
			t.Fatalf("request %d at %v before request %d at %v", i, r.Arrival, i-1, tr.Requests[i-1].Arrival)
		}
		if r.Arrival < 0 || r.Arrival%ms != 0 {
			t.Fatalf("request %d: Arrival %v is not a non-negative whole ms", i, r.Arrival)
		}
		if r.Tokens < 1 || r.Key == "" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if tr.Skipped < len(tr.SkippedExamples) || len(tr.SkippedExamples) > maxSkippedExamples {
		t.Fatalf("Skipped %d with %d examples", tr.Skipped, len(tr.SkippedExamples))
	}
}

func TestSortStableLarge(t *testing.T) {
	// Big enough that an unstable sort would reorder ties (small inputs are
	// insertion-sorted, which happens to be stable).
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "%d,k%05d\n", (7919*i)%13*1000, i)
	}
	tr, err := Read(strings.NewReader(b.String()), "x", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkTrace(t, tr, true)
	for i := 1; i < len(tr.Requests); i++ {
		a, c := tr.Requests[i-1], tr.Requests[i]
		if a.Arrival == c.Arrival && a.Key > c.Key {
			t.Fatalf("ties out of file order at %d: %s before %s", i, a.Key, c.Key)
		}
	}
}
