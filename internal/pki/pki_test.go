package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// A node certificate verifies against its CA for both uses, names the
// node (and its extra hosts), and not against another CA.
func TestIssueVerifies(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	n1, err := ca.Issue("n1", time.Hour, "10.0.0.1", "n1.example")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(n1.CertPEM, n1.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("usage %v: %v", usage, err)
		}
	}
	for _, h := range []string{"n1", "10.0.0.1", "n1.example"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if cert.VerifyHostname("n2") == nil {
		t.Error("n1's certificate names n2")
	}
	other, _ := NewCA("other", time.Hour)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: other.Pool()}); err == nil {
		t.Error("verified against another CA")
	}
	kp, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(kp); b == nil || b.Type != "PRIVATE KEY" {
		t.Error("the CA key is not a PEM PRIVATE KEY")
	}
	if _, err := ca.Issue("", time.Hour); err == nil {
		t.Error("issued a certificate with no name")
	}
	if _, err := NewCA("x", 0); err == nil {
		t.Error("made a CA valid for 0")
	}
}
