// Package keytemplate is the grammar of a rule's key template (config
// rules[].key): literal text and placeholders that take parts of an HTTP
// request, {header:NAME}, {client_addr}, {path:N}, {jwt:CLAIM}
// (unverified), {method}, and {NAME} or {query:NAME} for a query
// parameter. serve's HTTP mode (httplimit) builds keys with it and config
// validates templates with it, so a template that loads is one the edge
// can apply. A leaf package: both import it. Ours.
package keytemplate

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// Func builds a request's key; its error names the missing part (a
// header, a query parameter, a path segment, a JWT claim).
type Func func(r *http.Request) (string, error)

// Parse parses a key template; the error names the bad placeholder, or
// says the template is not valid UTF-8. A key the Func builds is valid
// UTF-8 (the cluster's keys are), or an error says it is not.
func Parse(tmpl string) (Func, error) {
	if !utf8.ValidString(tmpl) {
		return nil, fmt.Errorf("%q: not valid UTF-8", tmpl)
	}
	var parts []Func
	rest := tmpl
	for rest != "" {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			lit := rest
			parts = append(parts, func(*http.Request) (string, error) { return lit, nil })
			break
		}
		if rest[i] == '}' {
			return nil, fmt.Errorf("%q: '}' without '{'", tmpl)
		}
		if i > 0 {
			lit := rest[:i]
			parts = append(parts, func(*http.Request) (string, error) { return lit, nil })
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q: '{' without '}'", tmpl)
		}
		ph := rest[i+1 : i+end]
		rest = rest[i+end+1:]
		f, err := placeholder(ph)
		if err != nil {
			return nil, fmt.Errorf("%q: {%s}: %w", tmpl, ph, err)
		}
		parts = append(parts, f)
	}
	if len(parts) == 0 {
		return nil, errors.New("is empty")
	}
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for _, p := range parts {
			s, err := p(r)
			if err != nil {
				return "", err
			}
			b.WriteString(s)
		}
		if b.Len() == 0 {
			return "", errors.New("the key is empty")
		}
		if b.Len() > cluster.MaxKeyBytes {
			return "", fmt.Errorf("the key is %d bytes; at most %d", b.Len(), cluster.MaxKeyBytes)
		}
		if !utf8.ValidString(b.String()) {
			// cluster refuses it (peer messages carry keys as protobuf
			// strings): a 400 naming it, not a limiter failure.
			return "", errors.New("the key is not valid UTF-8")
		}
		return b.String(), nil
	}, nil
}

// placeholder is the Func of the placeholder ph (the text between '{' and
// '}'): a bare name (bareField) or KIND:ARG (fieldOf).
func placeholder(ph string) (Func, error) {
	kind, arg, hasArg := strings.Cut(ph, ":")
	if !hasArg {
		return bareField(kind)
	}
	return fieldOf(kind, arg)
}

// unknownPlaceholder is the error of a placeholder of no known form.
func unknownPlaceholder() error {
	return errors.New("unknown placeholder (known: {header:NAME}, {client_addr}, {path:N}, {jwt:CLAIM}, {method}, {query:NAME} or {NAME})")
}

// bareField is the Func of a placeholder without ':': {client_addr},
// {method}, or {NAME}, the query parameter NAME.
func bareField(name string) (Func, error) {
	switch name {
	case "client_addr":
		return clientAddr, nil
	case "method":
		return func(r *http.Request) (string, error) { return r.Method, nil }, nil
	case "":
		return nil, unknownPlaceholder()
	}
	return queryParam(name), nil
}

// fieldOf is the Func of a placeholder KIND:ARG: {header:NAME},
// {path:N}, {jwt:CLAIM} or {query:NAME}; ARG must not be empty.
func fieldOf(kind, arg string) (Func, error) {
	if arg == "" {
		return nil, unknownPlaceholder()
	}
	switch kind {
	case "header":
		return header(arg), nil
	case "path":
		return pathSegment(arg)
	case "jwt":
		return func(r *http.Request) (string, error) { return jwtClaim(r, arg) }, nil
	case "query":
		return queryParam(arg), nil
	}
	return nil, unknownPlaceholder()
}

// header is {header:NAME}: the header's value; an error when it is
// missing or empty.
func header(arg string) Func {
	name := http.CanonicalHeaderKey(arg)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("header %s is missing", name)
		}
		return v, nil
	}
}

// pathSegment is {path:N}: the URL path's Nth segment (from 1); an error
// when the request's path has none. Errors: N is not a number from 1.
func pathSegment(arg string) (Func, error) {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%q is not a segment number (1, 2, ...)", arg)
	}
	return func(r *http.Request) (string, error) {
		segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if n > len(segs) || segs[n-1] == "" {
			return "", fmt.Errorf("path %q has no segment %d", r.URL.Path, n)
		}
		return segs[n-1], nil
	}, nil
}

// queryParam is {query:NAME} and {NAME}: the query parameter's value; an
// error when it is missing or empty.
func queryParam(name string) Func {
	return func(r *http.Request) (string, error) {
		v := r.URL.Query().Get(name)
		if v == "" {
			return "", fmt.Errorf("query parameter %s is missing", name)
		}
		return v, nil
	}
}

func clientAddr(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host == "" {
		return "", errors.New("the client address is unknown")
	}
	return host, nil
}

// MaxJWTBytes bounds the Authorization header a claim is read from.
const MaxJWTBytes = 8 << 10

// jwtClaim reads claim from the bearer token's payload, unverified. A
// string claim is used as is, a number or boolean as its JSON text.
func jwtClaim(r *http.Request, claim string) (string, error) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("no bearer token in Authorization")
	}
	if len(tok) > MaxJWTBytes {
		return "", fmt.Errorf("bearer token of %d bytes; at most %d", len(tok), MaxJWTBytes)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("bearer token is not a JWT (header.payload.signature)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", fmt.Errorf("JWT payload: %v", err)
	}
	var claims map[string]json.RawMessage
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", fmt.Errorf("JWT payload is not a JSON object: %v", err)
	}
	raw, ok := claims[claim]
	if !ok {
		return "", fmt.Errorf("JWT has no claim %q", claim)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "", fmt.Errorf("JWT claim %q is empty", claim)
		}
		return s, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch v.(type) {
	case float64, bool:
		return string(raw), nil
	}
	return "", fmt.Errorf("JWT claim %q is not a string, number or boolean", claim)
}
