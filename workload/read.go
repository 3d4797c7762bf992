package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ReadOptions controls [ReadFile] and [Read]. The zero value reads CSV or CLF
// (auto-detected), fails on the first bad line and keys CLF records by host.
type ReadOptions struct {
	// Format is "auto" (the default when ""), "csv" or "clf".
	//
	// "auto" looks at the first non-empty line: a "ts_ms" header or a line starting
	// with digits and a comma means csv; a line containing ` [` and `] "` means clf;
	// anything else is an error.
	Format string
	// SkipBad counts and skips bad lines (Trace.Skipped, Trace.SkippedExamples)
	// instead of failing with a *LineError.
	SkipBad bool
	// Key selects the CLF field used as the request key: "host" (the default when ""),
	// "user" (the authuser field, "-" for anonymous requests) or "path" (the request
	// path without its query string). It must be empty for CSV input.
	Key string
}

// LineError is a bad record: File names the input, Line is its 1-based line number
// (counting every line, header and empty lines included) and Reason says what is wrong.
//
// Error() gives "File:Line: Reason", e.g.
// `trace.csv:17: ts_ms "abc" is not a whole number of milliseconds`.
type LineError struct {
	File   string
	Line   int
	Reason string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// Formats and CLF key fields accepted in ReadOptions.
const (
	formatAuto = "auto"
	formatCSV  = "csv"
	formatCLF  = "clf"

	keyHost = "host"
	keyUser = "user"
	keyPath = "path"
)

// maxLine is the longest line accepted; longer lines are bad lines.
const maxLine = 1 << 20

// maxMs is the largest timestamp in milliseconds whose time.Duration fits in int64
// (about 292 years, i.e. until the year 2262 for Unix times).
const maxMs = math.MaxInt64 / int64(time.Millisecond)

// ReadFile reads the trace in the file at path: CSV or CLF text (see [Read]), plain or
// gzip-compressed. Gzip is recognised by its magic bytes (1f 8b), not by the file name.
//
// Trace.Name is the base name of path; LineError.File is path as given. Errors from
// opening or reading the file wrap the os error and name the path (errors.Is(err,
// fs.ErrNotExist) works for a missing file).
func ReadFile(path string, opt ReadOptions) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err) // *fs.PathError names the path
	}
	defer f.Close()
	return read(f, path, filepath.Base(path), opt)
}

// Read reads a trace from r, which holds CSV or CLF text, plain or gzip-compressed (by
// magic bytes). name is used as Trace.Name and as LineError.File.
//
// CSV: one request per line, "ts_ms,key" or "ts_ms,key,tokens". ts_ms is a non-negative
// whole number of milliseconds (at most 9223372036854), key is non-empty and tokens is a
// positive whole number (default 1). An optional header "ts_ms,key" or
// "ts_ms,key,tokens" may be the first non-empty line. Fields may be RFC 4180 quoted
// (within one line); spaces and tabs around fields are dropped.
//
// CLF: Common or Combined Log Format access-log lines,
//
//	host ident authuser [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326
//
// optionally followed by ` "referer" "user-agent"` (text after the bytes field is
// ignored). Timestamps are converted to UTC with their own offset and must lie in
// 1970..2262. Each line is a request for 1 token, keyed by ReadOptions.Key.
//
// In both formats Arrival is the record's time minus the earliest record's time, so the
// trace starts at 0; for a file in time order the earliest record is the first one.
// Records out of time order are sorted stably (equal times keep file order). Empty and
// whitespace-only lines are skipped. A leading UTF-8 byte-order mark is ignored.
//
// Errors: a bad line gives a *LineError unless SkipBad is set; a trace without
// requests gives "workload: no requests in NAME"; an unknown Format or Key, an
// unrecognised format under "auto", and I/O or gzip errors give other errors.
func Read(r io.Reader, name string, opt ReadOptions) (*Trace, error) {
	return read(r, name, name, opt)
}

func read(r io.Reader, file, name string, opt ReadOptions) (*Trace, error) {
	format, key, err := readOptions(opt)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("workload: reading %s: %w", file, err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 64<<10)
	}

	p := parser{
		file:   file,
		key:    key,
		intern: make(interner),
		minMs:  math.MaxInt64,
		trace:  &Trace{Name: name},
	}
	lr := lineReader{br: br}
	first := true
	for {
		line, tooLong, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("workload: reading %s: %w", file, err)
		}
		if first {
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
			first = false
		}
		reason, err := p.line(line, tooLong, &format, opt.Key)
		if err != nil {
			return nil, err
		}
		if reason == "" {
			continue
		}
		if err := p.bad(&LineError{File: file, Line: lr.line, Reason: reason}, opt.SkipBad); err != nil {
			return nil, err
		}
	}
	return p.finish(file)
}

// readOptions is opt's format and CLF key, defaults filled in.
func readOptions(opt ReadOptions) (format, key string, err error) {
	format = opt.Format
	switch format {
	case "":
		format = formatAuto
	case formatAuto, formatCSV, formatCLF:
	default:
		return "", "", fmt.Errorf("workload: unknown trace format %q (want auto, csv or clf)", opt.Format)
	}
	key = opt.Key
	switch key {
	case "":
		key = keyHost
	case keyHost, keyUser, keyPath:
	default:
		return "", "", fmt.Errorf("workload: unknown CLF key %q (want host, user or path)", opt.Key)
	}
	return format, key, nil
}

// line parses one line (tooLong: it was, and has no content) in format
// (auto: sniffed from this first non-empty line, and set); optKey is the
// key option as given. It returns "" or the reason the line is bad, or an
// error that ends the read.
func (p *parser) line(line []byte, tooLong bool, format *string, optKey string) (string, error) {
	switch {
	case tooLong:
		return fmt.Sprintf("line is longer than %d bytes", maxLine), nil
	case len(trimSpace(line)) == 0:
		return "", nil
	}
	if *format == formatAuto {
		*format = sniff(line)
		if *format == "" {
			return "", fmt.Errorf("workload: %s: format not recognised from its first line %s: "+
				"want csv (\"ts_ms,key[,tokens]\" rows) or clf (Common/Combined Log Format access log); "+
				"set the format to csv or clf explicitly", p.file, quote(line))
		}
	}
	if *format == formatCSV && optKey != "" {
		return "", fmt.Errorf("workload: %s: the key option %q applies to CLF traces only, and this trace is csv", p.file, optKey)
	}
	if *format == formatCSV {
		return p.csvLine(line), nil
	}
	return p.clfLine(line), nil
}

// bad handles a bad line: le is the error, unless skipBad, which counts it
// and keeps a few examples.
func (p *parser) bad(le *LineError, skipBad bool) error {
	if !skipBad {
		return le
	}
	p.trace.Skipped++
	if len(p.trace.SkippedExamples) < maxSkippedExamples {
		p.trace.SkippedExamples = append(p.trace.SkippedExamples, le.Error())
	}
	return nil
}

// finish is the trace read from file: its requests, arrivals relative to
// the earliest, in time order.
func (p *parser) finish(file string) (*Trace, error) {
	t := p.trace
	t.Requests = p.requests()
	if len(t.Requests) == 0 {
		return nil, errNoRequests(file, t.Skipped)
	}
	// Arrival holds raw milliseconds until here; make it relative to the earliest.
	for i := range t.Requests {
		t.Requests[i].Arrival = time.Duration(int64(t.Requests[i].Arrival)-p.minMs) * time.Millisecond
	}
	sortStable(t.Requests)
	return t, nil
}

// sniff returns the format of a non-empty first line, or "" if it is not recognised.
func sniff(line []byte) string {
	if i := bytes.IndexByte(line, ','); i >= 0 {
		first := trimSpace(bytes.Trim(trimSpace(line[:i]), `"`))
		if len(first) > 0 && allDigits(first) || string(first) == "ts_ms" {
			return formatCSV
		}
	}
	if bytes.Contains(line, []byte(" [")) && bytes.Contains(line, []byte(`] "`)) {
		return formatCLF
	}
	return ""
}

// lineReader yields lines of any length, counting them from 1.
type lineReader struct {
	br   *bufio.Reader
	buf  []byte
	line int // number of the line last returned
}

// next returns the next line without its "\n" or "\r\n" and io.EOF after the last one.
// A line longer than maxLine is consumed and reported with tooLong (and no content).
// The returned slice is valid until the next call.
func (lr *lineReader) next() (line []byte, tooLong bool, err error) {
	b, err := lr.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		lr.buf = append(lr.buf[:0], b...)
		for err == bufio.ErrBufferFull {
			b, err = lr.br.ReadSlice('\n')
			if len(lr.buf) <= maxLine {
				lr.buf = append(lr.buf, b...)
			}
		}
		b = lr.buf
	}
	if err != nil && err != io.EOF {
		return nil, false, err
	}
	if err == io.EOF && len(b) == 0 {
		return nil, false, io.EOF
	}
	lr.line++
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) > maxLine {
		return nil, true, nil
	}
	return b, false, nil
}

// parser accumulates requests; Arrival holds raw milliseconds until read finishes.
type parser struct {
	file    string
	key     string
	intern  interner
	minMs   int64
	trace   *Trace
	chunks  [][]Request // full chunks of requests, in file order
	chunk   []Request   // the chunk being filled
	n       int         // requests in chunks and chunk
	nonHdr  bool        // a non-empty line has been seen (so no header may follow)
	fields  [][]byte    // scratch for csvLine
	lastTS  []byte      // CLF timestamp cache: text of the last parsed timestamp
	lastMs  int64       // and its Unix milliseconds
	hasLast bool
}

func (p *parser) add(ms int64, key []byte, tokens int64) {
	if ms < p.minMs {
		p.minMs = ms
	}
	if len(p.chunk) == cap(p.chunk) {
		if p.chunk != nil {
			p.chunks = append(p.chunks, p.chunk)
		}
		p.chunk = make([]Request, 0, chunkSize)
	}
	p.chunk = append(p.chunk, Request{
		Arrival: time.Duration(ms),
		Key:     p.intern.bytes(key),
		Tokens:  tokens,
	})
	p.n++
}

// chunkSize is the number of requests per chunk while reading. Collecting chunks and
// copying them once into an exactly sized slice costs about half the memory of growing
// one slice by append, and leaves no spare capacity in Trace.Requests.
const chunkSize = 8192

// requests returns all requests read, in file order, in one exactly sized slice.
func (p *parser) requests() []Request {
	out := make([]Request, 0, p.n)
	for _, c := range p.chunks {
		out = append(out, c...)
	}
	return append(out, p.chunk...)
}

// csvLine parses one non-empty CSV line, returning "" or the reason it is bad.
func (p *parser) csvLine(line []byte) string {
	firstLine := !p.nonHdr
	p.nonHdr = true
	fields, reason := splitFields(line, p.fields[:0])
	p.fields = fields[:0]
	if reason != "" {
		return reason
	}
	if string(fields[0]) == "ts_ms" {
		return csvHeader(line, fields, firstLine)
	}
	if len(fields) > 3 {
		return "too many fields: want ts_ms,key[,tokens]"
	}
	ms, reason := parseCount(fields[0], "ts_ms", "is not a whole number of milliseconds", maxMs)
	if reason != "" {
		return reason
	}
	if len(fields) < 2 {
		return "missing key: want ts_ms,key[,tokens]"
	}
	if len(fields[1]) == 0 {
		return "empty key"
	}
	tokens := int64(1)
	if len(fields) == 3 {
		tokens, reason = parseCount(fields[2], "tokens", "is not a positive whole number", math.MaxInt64)
		if reason != "" {
			return reason
		}
		if tokens == 0 {
			return fmt.Sprintf("tokens %s is not a positive whole number", quote(fields[2]))
		}
	}
	p.add(ms, fields[1], tokens)
	return ""
}

// csvHeader checks a header line (its fields, the first "ts_ms"): only
// on the first line, ts_ms,key or ts_ms,key,tokens.
func csvHeader(line []byte, fields [][]byte, firstLine bool) string {
	if !firstLine {
		return fmt.Sprintf("header %s after the first line", quote(line))
	}
	if len(fields) == 2 && string(fields[1]) == "key" ||
		len(fields) == 3 && string(fields[1]) == "key" && string(fields[2]) == "tokens" {
		return ""
	}
	return fmt.Sprintf("header %s is not ts_ms,key or ts_ms,key,tokens", quote(line))
}

// parseCount parses a non-negative decimal integer <= max, returning the reason
// "NAME "TEXT" WHAT" (or "is negative", "is too large") if it is not one.
func parseCount(b []byte, name, what string, max int64) (int64, string) {
	if len(b) == 0 || !allDigits(b) {
		if len(b) > 1 && b[0] == '-' && allDigits(b[1:]) && name == "ts_ms" {
			return 0, fmt.Sprintf("%s %s is negative", name, quote(b))
		}
		return 0, fmt.Sprintf("%s %s %s", name, quote(b), what)
	}
	var v int64
	for _, c := range b {
		d := int64(c - '0')
		if v > (max-d)/10 {
			return 0, fmt.Sprintf("%s %s is too large (max %d)", name, quote(b), max)
		}
		v = v*10 + d
	}
	return v, ""
}

// splitFields splits a CSV line into its fields, appending them to dst; it stops after
// 4 fields (more than any valid line has). Fields may be RFC 4180 quoted; spaces and
// tabs around fields are dropped.
func splitFields(line []byte, dst [][]byte) ([][]byte, string) {
	if bytes.IndexByte(line, '"') < 0 {
		for len(dst) < 4 {
			i := bytes.IndexByte(line, ',')
			if i < 0 {
				return append(dst, trimSpace(line)), ""
			}
			dst = append(dst, trimSpace(line[:i]))
			line = line[i+1:]
		}
		return dst, ""
	}
	for len(dst) < 4 {
		f := bytes.TrimLeft(line, " \t")
		if len(f) > 0 && f[0] == '"' {
			out := []byte{}
			j := 1
			for {
				k := bytes.IndexByte(f[j:], '"')
				if k < 0 {
					return dst, "unterminated quoted field"
				}
				out = append(out, f[j:j+k]...)
				j += k + 1
				if j < len(f) && f[j] == '"' {
					out = append(out, '"')
					j++
					continue
				}
				break
			}
			dst = append(dst, out)
			rest := bytes.TrimLeft(f[j:], " \t")
			if len(rest) == 0 {
				return dst, ""
			}
			if rest[0] != ',' {
				return dst, fmt.Sprintf("unexpected text %s after a quoted field", quote(rest))
			}
			line = rest[1:]
			continue
		}
		i := bytes.IndexByte(f, ',')
		if i < 0 {
			return append(dst, trimSpace(f)), ""
		}
		dst = append(dst, trimSpace(f[:i]))
		line = f[i+1:]
	}
	return dst, ""
}

// clfLayout is the CLF timestamp layout between the brackets.
const clfLayout = "02/Jan/2006:15:04:05 -0700"

const clfShape = `want host ident authuser [dd/Mon/yyyy:hh:mm:ss +hhmm] "request" status bytes`

// clfLine parses one non-empty CLF line, returning "" or the reason it is bad.
func (p *parser) clfLine(line []byte) string {
	if line[0] == ' ' || line[0] == '\t' {
		return "line starts with a space: " + clfShape
	}
	var head [3][]byte // host, ident, authuser
	rest := line
	for i := range head {
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			return fmt.Sprintf("only %d fields before the timestamp: %s", i+1, clfShape)
		}
		head[i], rest = rest[:j], rest[j+1:]
	}
	host, user := head[0], head[2]
	ms, rest, reason := p.clfTimestamp(rest)
	if reason != "" {
		return reason
	}
	request, rest, reason := clfRequest(rest)
	if reason != "" {
		return reason
	}
	if reason := clfStatusBytes(rest); reason != "" {
		return reason
	}
	key, reason := p.clfKey(host, user, request)
	if reason != "" {
		return reason
	}
	p.add(ms, key, 1)
	return ""
}

// clfTimestamp parses the "[timestamp]" at the start of rest to Unix
// milliseconds and returns what follows it, or the reason it is bad.
func (p *parser) clfTimestamp(rest []byte) (ms int64, after []byte, reason string) {
	if len(rest) == 0 || rest[0] != '[' {
		return 0, nil, fmt.Sprintf("expected [timestamp] after the authuser field, found %s", quote(rest))
	}
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		tok := rest
		if k := bytes.IndexByte(tok, ' '); k >= 0 && bytes.IndexByte(tok[k+1:], ' ') >= 0 {
			// "[dd/Mon/yyyy:hh:mm:ss +hhmm" holds one space; show up to the next one.
			tok = tok[:k+1+bytes.IndexByte(tok[k+1:], ' ')]
		}
		return 0, nil, fmt.Sprintf("timestamp %s has no closing ]", quote(tok))
	}
	ms, reason = p.clfTime(rest[1:end])
	if reason != "" {
		return 0, nil, reason
	}
	return ms, rest[end+1:], ""
}

// clfRequest parses the ` "request"` at the start of rest and returns the
// request (without quotes) and what follows it, or the reason it is bad.
func clfRequest(rest []byte) (request, after []byte, reason string) {
	if len(rest) < 2 || rest[0] != ' ' || rest[1] != '"' {
		return nil, nil, fmt.Sprintf(`expected "request" after the timestamp, found %s`, quote(rest))
	}
	rest = rest[2:]
	reqEnd := -1
	for i := 0; i < len(rest); i++ {
		if rest[i] == '\\' {
			i++ // escaped character, e.g. \" in Apache logs
			continue
		}
		if rest[i] == '"' {
			reqEnd = i
			break
		}
	}
	if reqEnd < 0 {
		return nil, nil, fmt.Sprintf("request %s has no closing quote", quote(append([]byte{'"'}, rest...)))
	}
	return rest[:reqEnd], rest[reqEnd+1:], ""
}

// clfStatusBytes checks the " status bytes" at the start of rest: "" or
// the reason they are bad.
func clfStatusBytes(rest []byte) string {
	if len(rest) == 0 || rest[0] != ' ' {
		return fmt.Sprintf("expected status and bytes after the request, found %s", quote(rest))
	}
	rest = rest[1:]
	status, rest, _ := bytes.Cut(rest, []byte{' '})
	if len(status) != 3 || !allDigits(status) {
		return fmt.Sprintf("status %s is not a 3-digit number", quote(status))
	}
	size, _, _ := bytes.Cut(rest, []byte{' '})
	if !(len(size) == 1 && size[0] == '-') && (len(size) == 0 || !allDigits(size)) {
		return fmt.Sprintf("bytes %s is not a number or -", quote(size))
	}
	return ""
}

// clfKey is the line's key as the parser's key option says: the host, the
// user or the request's path (without its query); or the reason there is
// none.
func (p *parser) clfKey(host, user, request []byte) ([]byte, string) {
	var key []byte
	switch p.key {
	case keyHost:
		key = host
	case keyUser:
		key = user
	case keyPath:
		_, after, ok := bytes.Cut(request, []byte{' '})
		path, _, _ := bytes.Cut(after, []byte{' '})
		path, _, _ = bytes.Cut(path, []byte{'?'})
		if !ok || len(path) == 0 {
			return nil, fmt.Sprintf("request %s has no path", quote(request))
		}
		key = path
	}
	if len(key) == 0 {
		return nil, fmt.Sprintf("empty %s field", p.key)
	}
	return key, ""
}

// clfTime parses a CLF timestamp (without brackets) to Unix milliseconds, caching the
// last one: logs with 1 s resolution repeat timestamps on many consecutive lines.
func (p *parser) clfTime(ts []byte) (int64, string) {
	if p.hasLast && bytes.Equal(ts, p.lastTS) {
		return p.lastMs, ""
	}
	t, err := time.Parse(clfLayout, string(ts))
	if err != nil {
		return 0, fmt.Sprintf("timestamp %s is not dd/Mon/yyyy:hh:mm:ss +hhmm", quote(ts))
	}
	ms := t.UnixMilli()
	if t.Year() < 1970 || ms < 0 {
		return 0, fmt.Sprintf("timestamp %s is before 1970", quote(ts))
	}
	if t.Year() > 2262 || ms > maxMs {
		return 0, fmt.Sprintf("timestamp %s is after 2262", quote(ts))
	}
	p.lastTS = append(p.lastTS[:0], ts...)
	p.lastMs = ms
	p.hasLast = true
	return ms, ""
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func trimSpace(b []byte) []byte {
	return bytes.Trim(b, " \t")
}

// quote returns b as a Go-quoted string, shortened to 60 bytes with "..." so that error
// messages stay readable.
func quote(b []byte) string {
	const max = 60
	if len(b) > max {
		return strconv.Quote(strings.ToValidUTF8(string(b[:max]), "")) + "..."
	}
	return strconv.Quote(string(b))
}
