package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The TLS builders' errors name the config field that is wrong.
func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"api cert", func() error { _, err := (&APITLS{CertFile: missing, KeyFile: missing}).Config(); return err }, "node.api_tls.cert_file/key_file: "},
		{"peer cert", func() error {
			_, err := (&TLS{CertFile: missing, KeyFile: missing, CAFile: notPEM}).Config()
			return err
		}, "node.tls.cert_file/key_file: "},
		{"no file", func() error { _, err := CertPool("node.tls.ca_file", missing); return err }, "node.tls.ca_file: open " + missing},
		{"not PEM", func() error { _, err := CertPool("--tls-ca", notPEM); return err }, "--tls-ca: " + notPEM + " holds no PEM certificate"},
	} {
		if err := c.err(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v; want it to start with %q", c.name, err, c.want)
		}
	}
}
