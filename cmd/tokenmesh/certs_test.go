package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// `tokenmesh certs` writes a CA and node certificates that serve's peer
// TLS loads, and with which two peers exchange frames over mTLS; keys are
// private files; it never overwrites; bad flags are usage errors.
func TestCertsForPeerMTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	stdout, stderr, code := tokenmesh(t, "certs", "--out", dir, "--nodes", "n1,n2", "--host", "n1=127.0.0.1")
	if code != 0 {
		t.Fatalf("certs: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "cert_file: "+filepath.Join(dir, "n1.pem")) {
		t.Errorf("certs does not say how to configure a node:\n%s", stdout)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "n1.pem", "n1-key.pem", "n2.pem", "n2-key.pem"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, "-key.pem") && st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	box := make(chan cluster.Frame, 4)
	trs := map[strategy.NodeID]*grpcpeer.Transport{}
	for _, n := range []string{"n1", "n2"} {
		tc, err := (&config.TLS{CertFile: filepath.Join(dir, n+".pem"), KeyFile: filepath.Join(dir, n+"-key.pem"), CAFile: filepath.Join(dir, "ca.pem")}).Config()
		if err != nil {
			t.Fatal(err)
		}
		tr, err := grpcpeer.New(grpcpeer.Config{Self: strategy.NodeID(n), ListenAddr: "127.0.0.1:0", TLS: tc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[strategy.NodeID(n)] = tr
	}
	book := map[strategy.NodeID]string{"n1": trs["n1"].Addr(), "n2": trs["n2"].Addr()}
	for _, tr := range trs {
		tr.SetPeers(book)
	}
	trs["n2"].Listen(func(f cluster.Frame) { box <- f })
	if err := trs["n1"].Send("n2", cluster.Frame{Rule: "r", Payload: []byte("over mTLS")}); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-box:
		if f.From != "n1" || string(f.Payload) != "over mTLS" {
			t.Fatalf("got %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no frame over mTLS with the generated certificates (n1: %+v, n2: %+v)", trs["n1"].Stats(), trs["n2"].Stats())
	}

	if _, stderr, code := tokenmesh(t, "certs", "--out", dir, "--nodes", "n3"); code == 0 || !strings.Contains(stderr, "not overwriting") {
		t.Errorf("certs over existing files: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "n3.pem")); err == nil {
		t.Error("certs refused to overwrite ca.pem but wrote n3.pem: it must refuse before writing anything")
	}
	for _, args := range [][]string{
		{"certs", "--nodes", "n1"},
		{"certs", "--out", dir + "2", "--nodes", ""},
		{"certs", "--out", dir + "2", "--nodes", "n1,n1"},
		{"certs", "--out", dir + "2", "--nodes", "../x"},
		{"certs", "--out", dir + "2", "--nodes", "n1", "--host", "n9=1.2.3.4"},
	} {
		if _, stderr, code := tokenmesh(t, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, stderr)
		}
	}
}
