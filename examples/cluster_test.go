package examples

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tokenmesh/tokenmesh/config"
)

// The three local cluster configs load and validate (config.Load), use
// distinct loopback ports, list each other in join and share one
// secret_key.
func TestClusterConfigsLoad(t *testing.T) {
	var files []*config.File
	for n := 1; n <= 3; n++ {
		path := filepath.Join("cluster", fmt.Sprintf("n%d.yaml", n))
		f, err := config.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		files = append(files, f)
	}
	ports := map[string]string{}
	gossip := map[string]bool{}
	for _, f := range files {
		nd := f.Node
		for _, a := range []string{nd.APIAddr, nd.GRPCAddr, nd.PeerAddr, nd.GossipAddr} {
			if other, dup := ports[a]; dup {
				t.Errorf("%s and %s both use %s", nd.Name, other, a)
			}
			ports[a] = nd.Name
		}
		gossip[nd.GossipAddr] = true
	}
	for _, f := range files {
		nd := f.Node
		if len(nd.Join) != 2 {
			t.Errorf("%s joins %v, want the other two", nd.Name, nd.Join)
		}
		for _, j := range nd.Join {
			if !gossip[j] || j == nd.GossipAddr {
				t.Errorf("%s joins %s, which is no other node's gossip address", nd.Name, j)
			}
		}
		if !bytes.Equal(nd.SecretKey, files[0].Node.SecretKey) || len(nd.SecretKey) != 32 {
			t.Errorf("%s: secret_key differs from n1's or is not 32 bytes", nd.Name)
		}
		if len(f.Rules) != 1 || f.Rules[0].Name != "api" {
			t.Errorf("%s: rules %+v, want the one rule api", nd.Name, f.Rules)
		}
	}
}
