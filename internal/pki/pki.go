// Package pki makes a small certificate authority and node certificates
// for peer mTLS (node.tls) and the API's TLS: ECDSA P-256 keys and X.509
// certificates from the standard library (crypto/x509). It serves
// `tokenmesh certs` (an operator without a PKI of their own) and the
// tests' throw-away CAs. Ours (operations tooling; no source document).
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Backdate is how far before now certificates become valid, so that a
// peer whose clock is a little behind accepts them at once.
const Backdate = time.Hour

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte // Cert, PEM "CERTIFICATE"
}

// Issued is a certificate and its key.
type Issued struct {
	CertPEM []byte // PEM "CERTIFICATE"
	KeyPEM  []byte // PEM "PRIVATE KEY" (PKCS #8)
	// TLS is the pair, ready for tls.Config.Certificates.
	TLS tls.Certificate
}

// NewCA makes a self-signed CA named commonName, valid for validFor from
// now (and Backdate before). Errors: an empty name, validFor <= 0, a
// failure of the random source.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("pki: the CA's name is empty")
	}
	if validFor <= 0 {
		return nil, fmt.Errorf("pki: validity %v is not positive", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-Backdate), NotAfter: now.Add(validFor), IsCA: true, BasicConstraintsValid: true,
		MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool is a pool holding the CA's certificate (for RootCAs and ClientCAs).
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// KeyPEM is the CA's private key, PEM "PRIVATE KEY" (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	b, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b}), nil
}

// Issue makes a certificate for name, valid for validFor, for both server
// and client authentication (a peer is both): its common name and a
// subject alternative name are name (an IP SAN when name is an IP
// address, a DNS SAN otherwise; grpcpeer checks that a peer's certificate
// names its node id), plus the extra hosts (IP addresses or DNS names).
// Errors: an empty name or host, validFor <= 0, a failure of the random
// source.
func (ca *CA) Issue(name string, validFor time.Duration, hosts ...string) (Issued, error) {
	if name == "" {
		return Issued{}, errors.New("pki: the certificate's name is empty")
	}
	if validFor <= 0 {
		return Issued{}, fmt.Errorf("pki: validity %v is not positive", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: key for %s: %w", name, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return Issued{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-Backdate), NotAfter: now.Add(validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, h := range append([]string{name}, hosts...) {
		if h == "" {
			return Issued{}, fmt.Errorf("pki: %s: an empty host name", name)
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: certificate for %s: %w", name, err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, fmt.Errorf("pki: key for %s: %w", name, err)
	}
	return Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}, nil
}

// serialNumber is a random 128-bit serial (RFC 5280 allows up to 20 bytes).
func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
