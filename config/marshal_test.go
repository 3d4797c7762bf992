package config

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// fullFile sets every field of Node and rule.Rule to a value other than its
// zero value and its default, so that a field Marshal forgets fails the
// round trip below (TestFullFileSetsEveryField keeps it full).
func fullFile() *File {
	return &File{
		Node: Node{
			Name: "eu.n7", Region: "eu", APIAddr: "127.0.0.1:18080", GRPCAddr: "127.0.0.1:18081",
			APITLS:   &APITLS{CertFile: "/c.pem", KeyFile: "/k.pem", ClientCAFile: "/ca.pem"},
			PeerAddr: "127.0.0.1:17947", GossipAddr: "127.0.0.1:17946", Join: []string{"127.0.0.1:27946", "127.0.0.1:37946"},
			SecretKey: []byte("0123456789abcdef0123456789abcdef"), SecretKeyFile: "",
			TLS:      &TLS{CertFile: "/pc.pem", KeyFile: "/pk.pem", CAFile: "/pca.pem"},
			StateDir: "/var/lib/tm", SnapshotInterval: 250 * time.Millisecond, Insecure: true,
			APITimeouts: APITimeouts{ReadHeader: time.Second, Read: 2 * time.Second, Write: 3 * time.Second, Idle: 4 * time.Second},
			MemoryLimit: 512 << 20, ReconnectInterval: 2 * time.Second, ReconnectTimeout: time.Hour, ProbeInterval: 300 * time.Millisecond, DrainDelay: 7 * time.Second,
			EnvoyConfig: "/etc/envoy", EnvoyStrategy: "quota", EnvoyShadowMode: true, EnvoyMaxOverridesPerDescriptor: 4, EnvoyMaxOverrides: 100, LatencyHint: LatencyHint{Value: 3 * time.Millisecond}, HTTPRefusalStatus: http.StatusForbidden,
		},
		Rules: []rule.Rule{
			{Name: "api", Key: "{header:x-api-key}", Rate: bucket.Rate{Tokens: 1, Per: 3 * time.Second}, Burst: 7,
				Strategy: "gcounter", Params: []string{"gossip=20ms"}, Partition: strategy.PartitionConserve},
			{Name: "b", Key: DefaultKey, Rate: bucket.Rate{Tokens: 1, Per: 333333333}, Burst: 1, Strategy: "owner", Params: []string{"hold=1ms", "timeout=2s"}},
		},
	}
}

// TestFullFileSetsEveryField: every field of Node and of the first rule
// in fullFile is set (SecretKeyFile excepted: it excludes SecretKey and
// has its own test), so a new field must be added there, and so to Marshal.
func TestFullFileSetsEveryField(t *testing.T) {
	f := fullFile()
	for _, v := range []reflect.Value{reflect.ValueOf(f.Node), reflect.ValueOf(f.Rules[0])} {
		for i := 0; i < v.NumField(); i++ {
			name := v.Type().Field(i).Name
			if name == "SecretKeyFile" {
				continue
			}
			if v.Field(i).IsZero() {
				t.Errorf("fullFile leaves %s.%s at its zero value: set it so that the Marshal round trip covers it", v.Type().Name(), name)
			}
		}
	}
}

// TestMarshalRoundTrip: Parse(Marshal(f)) is f, for a file with every
// field set, for Default(), and for every example config in the repo.
func TestMarshalRoundTrip(t *testing.T) {
	check := func(name string, f *File) {
		t.Helper()
		b, err := Marshal(f)
		if err != nil {
			t.Fatalf("%s: Marshal: %v", name, err)
		}
		g, err := Parse(b, name)
		if err != nil {
			t.Fatalf("%s: Parse(Marshal): %v\n%s", name, err, b)
		}
		// Rates come back in lowest terms (Default's 10/s is Rate{10, 1s}).
		for i := range f.Rules {
			f.Rules[i].Rate = f.Rules[i].Rate.Reduced()
		}
		if !reflect.DeepEqual(f, g) {
			t.Errorf("%s: round trip changed the file:\n got %+v\nwant %+v\nyaml:\n%s", name, g, f, b)
		}
	}
	check("full", fullFile())
	check("default", Default())
	withFile := fullFile()
	withFile.Node.SecretKey, withFile.Node.SecretKeyFile = nil, "/etc/tm/key"
	b, err := Marshal(withFile)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(b, "withfile")
	if err != nil || g.Node.SecretKeyFile != "/etc/tm/key" || g.Node.SecretKey != nil {
		t.Fatalf("secret_key_file: %v, %+v", err, g)
	}
	paths, _ := filepath.Glob("../examples/config/*.yaml")
	if len(paths) == 0 {
		t.Fatal("no example configs found in ../examples/config")
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse(data, p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		check(p, f)
	}
}

// TestMarshalRejectsBadParams: a rule whose params do not parse is an
// error naming the rule, not a file Parse would misread.
func TestMarshalRejectsBadParams(t *testing.T) {
	f := Default()
	f.Rules[0].Params = []string{"nonsense"}
	if _, err := Marshal(f); err == nil {
		t.Fatal("Marshal accepted params without '='")
	}
	f.Rules[0].Params = nil
	f.Rules[0].Rate = rule.MustRate("10/s")
	if _, err := Marshal(f); err != nil {
		t.Fatal(err)
	}
}
