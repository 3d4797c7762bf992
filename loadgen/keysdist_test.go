package loadgen

import (
	"math"
	"strings"
	"testing"
)

func TestParseKeysDist(t *testing.T) {
	for _, c := range []struct {
		in   string
		want KeysDist
	}{
		{"uniform", KeysDist{Kind: DistUniform}},
		{" uniform ", KeysDist{Kind: DistUniform}},
		{"zipf", KeysDist{Kind: DistZipf, N: 100_000, S: 1.1}},
		{"zipf:s=1.1,n=100000", KeysDist{Kind: DistZipf, N: 100_000, S: 1.1}},
		{"zipf: n=50 , s=0.8", KeysDist{Kind: DistZipf, N: 50, S: 0.8}},
		{"zipf:s=2", KeysDist{Kind: DistZipf, N: 100_000, S: 2}},
		{"zipf:n=2", KeysDist{Kind: DistZipf, N: 2, S: 1.1}},
		{"tenants", KeysDist{Kind: DistTenants, N: 20}},
		{"tenants:20", KeysDist{Kind: DistTenants, N: 20}},
		{"tenants:1", KeysDist{Kind: DistTenants, N: 1}},
	} {
		got, err := ParseKeysDist(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		// String reads back
		if again, err := ParseKeysDist(got.String()); err != nil || again != got {
			t.Errorf("%q: String %q reads back as %+v, %v", c.in, got.String(), again, err)
		}
	}
	for _, c := range []struct{ in, why string }{
		{"", "empty"},
		{"pareto", `unknown distribution "pareto"`},
		{"Uniform", "unknown distribution"},
		{"uniform:", "nothing after ':'"},
		{"uniform:n=5", "uniform takes no parameter"},
		{"tenants:", "nothing after ':'"},
		{"tenants:0", "0 tenants"},
		{"tenants:-3", "-3 tenants"},
		{"tenants:+3", "not a whole number"},
		{"tenants:x", "not a whole number"},
		{"tenants:2.5", "not a whole number"},
		{"tenants:10000001", "want 1..10000000"},
		{"zipf:", "nothing after ':'"},
		{"zipf:s=0", "want 0 < s <= 10"},
		{"zipf:s=-1", "want 0 < s <= 10"},
		{"zipf:s=11", "want 0 < s <= 10"},
		{"zipf:s=NaN", "want 0 < s <= 10"},
		{"zipf:s=inf", "want 0 < s <= 10"},
		{"zipf:s=0x1p0", "not a number"},
		{"zipf:s=abc", "not a number"},
		{"zipf:n=1", "want 2..10000000"},
		{"zipf:n=1e5", "not a whole number"},
		{"zipf:n=20000000", "want 2..10000000"},
		{"zipf:s", "has no value"},
		{"zipf:s=", "has no value"},
		{"zipf:s=1,s=2", "given twice"},
		{"zipf:k=3", `unknown parameter "k"`},
		{"zipf:s=1,,n=3", "empty parameter"},
	} {
		_, err := ParseKeysDist(c.in)
		if err == nil {
			t.Errorf("%q accepted", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "--keys-dist") || !strings.Contains(err.Error(), "zipf:s=1.1,n=100000") {
			t.Errorf("%q: %v; want it to say %q, name the flag and show the forms", c.in, err, c.why)
		}
	}
}

// The parser never panics; what it accepts is in range and reads back.
func FuzzParseKeysDist(f *testing.F) {
	for _, s := range []string{"uniform", "zipf:s=1.1,n=100000", "tenants:20", "zipf", "tenants", "zipf:n=3,s=1e-3", "zipf:s=1,s=1", ":", "tenants:+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseKeysDist(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--keys-dist ") {
				t.Fatalf("%q: error %q does not name the flag", s, err)
			}
			return
		}
		switch d.Kind {
		case DistUniform:
			if d.N != 0 || d.S != 0 {
				t.Fatalf("%q: %+v", s, d)
			}
		case DistTenants:
			if d.N < 1 || d.N > MaxDistKeys || d.S != 0 {
				t.Fatalf("%q: %+v", s, d)
			}
		case DistZipf:
			if d.N < 2 || d.N > MaxDistKeys || !(d.S > 0 && d.S <= MaxZipfS) {
				t.Fatalf("%q: %+v", s, d)
			}
		default:
			t.Fatalf("%q: kind %q", s, d.Kind)
		}
		if again, err := ParseKeysDist(d.String()); err != nil || again != d {
			t.Fatalf("%q: %+v reads back from %q as %+v, %v", s, d, d.String(), again, err)
		}
	})
}

func TestKeysDistApply(t *testing.T) {
	u, _ := ParseKeysDist("uniform")
	tn, _ := ParseKeysDist("tenants:20")
	z, _ := ParseKeysDist("zipf:s=1,n=4")
	if u.Keys(500) != 500 || u.Hottest(500) != 1.0/500 || tn.Keys(500) != 20 || tn.Hottest(500) != 1.0/20 || z.Keys(500) != 4 {
		t.Errorf("keys %d %d %d, hottest %v %v", u.Keys(500), tn.Keys(500), z.Keys(500), u.Hottest(500), tn.Hottest(500))
	}
	if h := z.Hottest(500); math.Abs(h-1/(1+0.5+1.0/3+0.25)) > 1e-12 {
		t.Errorf("zipf s=1 n=4: hottest %v", h)
	}
	var o Options
	tn.Apply(&o, 500)
	if o.Keys != 20 || o.KeyPrefix != "tenant" || o.ZipfS != 0 {
		t.Errorf("tenants: %+v", o)
	}
	o = Options{}
	z.Apply(&o, 500)
	if o.Keys != 4 || o.ZipfS != 1 || o.KeyPrefix != "" {
		t.Errorf("zipf: %+v", o)
	}
	o = Options{}
	u.Apply(&o, 500)
	if o.Keys != 500 || o.ZipfS != 0 || o.KeyPrefix != "" {
		t.Errorf("uniform: %+v", o)
	}

}
