package keytemplate

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return "Bearer " + enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(payload)) + ".sig"
}

func TestKeyTemplates(t *testing.T) {
	for _, x := range []struct {
		tmpl, path string
		hdr        map[string]string
		want, err  string
	}{
		{"{client_addr}", "/", nil, "192.0.2.1", ""},
		{"ip:{client_addr}", "/", nil, "ip:192.0.2.1", ""},
		{"{header:x-tenant}/{method}", "/", map[string]string{"X-Tenant": "acme"}, "acme/GET", ""},
		{"{path:1}", "/v1/x", nil, "v1", ""},
		{"{path:3}", "/v1/x", nil, "", "has no segment 3"},
		{"{jwt:sub}", "/", map[string]string{"Authorization": jwt(`{"sub":"user-7"}`)}, "user-7", ""},
		{"{jwt:org}", "/", map[string]string{"Authorization": jwt(`{"org":42}`)}, "42", ""},
		{"{jwt:org}", "/", map[string]string{"Authorization": jwt(`{"sub":"x"}`)}, "", `no claim "org"`},
		{"{jwt:sub}", "/", map[string]string{"Authorization": "Bearer abc"}, "", "not a JWT"},
		{"{jwt:sub}", "/", map[string]string{"Authorization": "Bearer a.!!!.c"}, "", "JWT payload"},
		{"{jwt:sub}", "/", nil, "", "no bearer token"},
		{"{tenant}", "/?tenant=acme", nil, "acme", ""},
		{"{query:key}", "/?key=k1", nil, "k1", ""},
		{"{key}", "/", nil, "", "query parameter key is missing"},
		{"{header:x-api-key}", "/", map[string]string{"X-Api-Key": "k\xff1"}, "", "not valid UTF-8"},
		{"{key}", "/?key=%ff", nil, "", "not valid UTF-8"},
	} {
		f, err := Parse(x.tmpl)
		if err != nil {
			t.Fatalf("Parse(%q): %v", x.tmpl, err)
		}
		r := httptest.NewRequest(http.MethodGet, x.path, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		for k, v := range x.hdr {
			r.Header.Set(k, v)
		}
		got, err := f(r)
		if got != x.want || (x.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), x.err) {
			t.Errorf("%s on %s %v: %q, %v; want %q, %q", x.tmpl, x.path, x.hdr, got, err, x.want, x.err)
		}
	}
	for _, bad := range []string{"{nope:x}", "{}", "{header:}", "{path:0}", "{path:x}", "{client_addr", "a}", "", "k\xff{key}"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// FuzzJWTClaim: any Authorization header gives a claim or an error, never
// a panic.
func FuzzJWTClaim(f *testing.F) {
	f.Add(jwt(`{"sub":"x"}`), "sub")
	f.Add("Bearer a.b.c", "sub")
	f.Fuzz(func(t *testing.T, auth, claim string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", auth)
		v, err := jwtClaim(r, claim)
		if err == nil && v == "" {
			t.Fatal("empty claim without error")
		}
	})
}

// FuzzParse: any template parses or fails with an error, never panics;
// one that parses builds a key or an error for a request, never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"{key}", "{header:x-tenant}/{method}", "{path:2}", "{jwt:sub}", "a{", "}", "{}", "{nope:x}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		k, err := Parse(tmpl)
		if err != nil {
			if k != nil {
				t.Fatal("a function with an error")
			}
			return
		}
		r := httptest.NewRequest(http.MethodGet, "/a/b?key=k&tenant=t", nil)
		r.Header.Set("X-Tenant", "acme")
		if v, err := k(r); err == nil && (v == "" || !utf8.ValidString(v)) {
			t.Fatalf("%q: key %q without error", tmpl, v)
		}
	})
}
