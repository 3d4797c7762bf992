package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/internal/pki"
)

// newTestCA is a throw-away certificate authority for TLS tests.
func newTestCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("tokenmesh test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue returns a PEM certificate and key for name from ca, valid for
// server (127.0.0.1) and client authentication.
func issue(t *testing.T, ca *pki.CA, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	iss, err := ca.Issue(name, time.Hour, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return iss.CertPEM, iss.KeyPEM
}

// TestServeAPITLS runs `tokenmesh serve` with node.api_tls and a
// client_ca_file: both client APIs answer only over TLS and only to a
// client with a certificate from that CA.
func TestServeAPITLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := newTestCA(t)
	srvCert, srvKey := issue(t, ca, "tokenmesh-api")
	cliCert, cliKey := issue(t, ca, "client")
	write("ca.pem", ca.CertPEM)
	write("api.pem", srvCert)
	write("api-key.pem", srvKey)
	cfg := write("tokenmesh.yaml", []byte(`node:
  name: tls-e2e
  api_addr: 127.0.0.1:0
  grpc_addr: 127.0.0.1:0
  peer_addr: 127.0.0.1:0
  gossip_addr: 127.0.0.1:0
  api_tls:
    cert_file: api.pem
    key_file: api-key.pem
    client_ca_file: ca.pem
rules:
  - name: api
    rate: 1/s
    burst: 2
`))
	addrFile := filepath.Join(dir, "addrs.json")
	cmd := exec.Command(binary, "serve", "--config", cfg, "--addr-file", addrFile)
	var out lockedbuf.Buffer // read while the process writes
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var addrs daemon.Addrs
	for deadline := time.Now().Add(15 * time.Second); ; {
		if b, err := os.ReadFile(addrFile); err == nil && json.Unmarshal(b, &addrs) == nil && addrs.GRPC != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no --addr-file after 15 s; output:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	pair, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	noCert := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	check := func(creds credentials.TransportCredentials) (*tokenmeshv1.CheckResponse, error) {
		conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tokenmeshv1.NewRateLimitServiceClient(conn).Check(ctx, &tokenmeshv1.CheckRequest{
			Checks: []*tokenmeshv1.CheckItem{{Rule: "api", Key: "k", Hits: 1}}})
	}
	resp, err := check(credentials.NewTLS(withCert))
	if err != nil || len(resp.GetResults()) != 1 || !resp.GetResults()[0].GetAllowed() {
		t.Fatalf("gRPC over TLS with a client certificate: %v %v\n%s", resp, err, out.String())
	}
	if _, err := check(credentials.NewTLS(noCert)); err == nil {
		t.Error("gRPC over TLS without a client certificate was answered")
	}
	if _, err := check(insecure.NewCredentials()); err == nil {
		t.Error("plaintext gRPC was answered")
	}

	get := func(cfg *tls.Config, url string) (int, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		r, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		r.Body.Close()
		return r.StatusCode, nil
	}
	if code, err := get(withCert, "https://"+addrs.API+"/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("HTTPS /readyz with a client certificate: %d %v", code, err)
	}
	if _, err := get(noCert, "https://"+addrs.API+"/readyz"); err == nil {
		t.Error("HTTPS without a client certificate was answered")
	}
	if code, err := get(nil, "http://"+addrs.API+"/readyz"); err == nil && code == http.StatusOK {
		t.Error("plain HTTP was answered 200")
	}
	if !strings.Contains(out.String(), "https://") {
		t.Errorf("serve did not announce its API as https:\n%s", out.String())
	}
}
