package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Config builds the client APIs' server TLS config (TLS 1.2 at least,
// ALPN h2 and http/1.1, for gRPC and HTTP on one certificate): the
// certificate and key, and with ClientCAFile, client certificates from
// that CA required. Errors name the field: "node.api_tls.cert_file/key_file:
// ...", "node.api_tls.client_ca_file: ...".
func (t *APITLS) Config() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node.api_tls.cert_file/key_file: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if t.ClientCAFile != "" {
		pool, err := CertPool("node.api_tls.client_ca_file", t.ClientCAFile)
		if err != nil {
			return nil, err
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Config builds the peer streams' mutual-TLS config (TLS 1.2 at least):
// this node's certificate and key, CAFile's CA as the root for servers
// and clients alike, client certificates required. Errors name the field:
// "node.tls.cert_file/key_file: ...", "node.tls.ca_file: ...".
func (t *TLS) Config() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node.tls.cert_file/key_file: %w", err)
	}
	pool, err := CertPool("node.tls.ca_file", t.CAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// CertPool reads the PEM CA certificates at path. Errors name field, the
// setting that gave the path ("node.tls.ca_file", "--tls-ca"): the file
// does not read, or holds no PEM certificate.
func CertPool(field, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", field, path)
	}
	return pool, nil
}
