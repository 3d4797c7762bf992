package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/internal/pki"
)

// certsOptions are certs' flags.
type certsOptions struct {
	out   string
	nodes string
	hosts []string // name=host,host
	valid time.Duration
}

// certNodeName is what a node name must look like to name files and
// certificates.
var certNodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func newCertsCmd() *cobra.Command {
	var opts certsOptions
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a CA and node certificates for peer mutual TLS (node.tls)",
		Long: `certs creates a certificate authority and one certificate per node, for
node.tls (mutual TLS between peers), for an operator who has no PKI of
their own: ECDSA P-256 keys, X.509 certificates (crypto/x509). Each node's
certificate names the node (common name and subject alternative name): a
peer accepts a frame only from a stream whose client certificate names the
node id it claims. Use --host to add the addresses a node is reached at
(IP or DNS SANs), e.g. for the API's TLS.

It writes to --out (created if missing; existing files are never
overwritten):

  ca.pem          the CA certificate: node.tls.ca_file on every node
  ca-key.pem      the CA's private key (0600): keep it offline; needed only
                  to issue more certificates (not by tokenmesh)
  NODE.pem        NODE's certificate: node.tls.cert_file
  NODE-key.pem    NODE's private key (0600): node.tls.key_file

Keep every *-key.pem secret; give each node only its own key.`,
		Example: `  tokenmesh certs --out /etc/tokenmesh/pki --nodes n1,n2,n3
  tokenmesh certs --out pki --nodes n1,n2 --host n1=10.0.0.1 --host n2=10.0.0.2 --valid 8760h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCerts(cmd, opts)
		},
	}
	cmd.Flags().StringVar(&opts.out, "out", "", "directory to write the CA and node certificates to (required)")
	cmd.Flags().StringVar(&opts.nodes, "nodes", "", "comma-separated node names (node.name of each node), e.g. n1,n2,n3 (required)")
	cmd.Flags().StringArrayVar(&opts.hosts, "host", nil, "NODE=HOST[,HOST...]: extra IP addresses or DNS names for NODE's certificate (repeatable)")
	cmd.Flags().DurationVar(&opts.valid, "valid", 365*24*time.Hour, "validity of the CA and the node certificates")
	return cmd
}

func runCerts(cmd *cobra.Command, opts certsOptions) error {
	if opts.out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	if opts.valid <= 0 {
		return fmt.Errorf("%w: --valid %v must be positive", errUsage, opts.valid)
	}
	nodes, err := parseCertNodes(opts.nodes)
	if err != nil {
		return err
	}
	hosts, err := parseCertHosts(opts.hosts, nodes)
	if err != nil {
		return err
	}
	ca, files, order, err := issueCerts(nodes, hosts, opts.valid)
	if err != nil {
		return err
	}
	if err := writeCertFiles(opts.out, files, order); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "wrote a CA and %d node certificates to %s (valid until %s)\n", len(nodes), opts.out,
		ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "on node %s, for example:\n  node:\n    name: %s\n    tls:\n      cert_file: %s\n      key_file: %s\n      ca_file: %s\n",
		nodes[0], nodes[0], filepath.Join(opts.out, nodes[0]+".pem"), filepath.Join(opts.out, nodes[0]+"-key.pem"), filepath.Join(opts.out, "ca.pem"))
	fmt.Fprintln(out, "keep ca-key.pem offline, and give each node only its own key")
	return nil
}

// parseCertNodes parses --nodes (list): node names, each once, none
// "ca".
func parseCertNodes(list string) ([]string, error) {
	var nodes []string
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			return nil, fmt.Errorf("%w: --nodes %q: want names separated by commas, e.g. n1,n2,n3", errUsage, list)
		case !certNodeName.MatchString(n):
			return nil, fmt.Errorf("%w: --nodes: %q is not a node name (letters, digits, '.', '_', '-'; at most 128)", errUsage, n)
		case n == "ca":
			return nil, fmt.Errorf("%w: --nodes: %q is reserved for the CA's files", errUsage, n)
		case seen[n]:
			return nil, fmt.Errorf("%w: --nodes: %q is listed twice", errUsage, n)
		}
		seen[n] = true
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// parseCertHosts parses the --host flags: the extra hosts of each of
// nodes.
func parseCertHosts(flags, nodes []string) (map[string][]string, error) {
	hosts := map[string][]string{}
	for _, h := range flags {
		name, list, ok := strings.Cut(h, "=")
		if !ok || !slices.Contains(nodes, name) || list == "" {
			return nil, fmt.Errorf("%w: --host %q: want NODE=HOST[,HOST...] with NODE one of --nodes", errUsage, h)
		}
		for _, x := range strings.Split(list, ",") {
			if x = strings.TrimSpace(x); x == "" {
				return nil, fmt.Errorf("%w: --host %q: an empty host", errUsage, h)
			}
			hosts[name] = append(hosts[name], x)
		}
	}
	return hosts, nil
}

// issueCerts creates a CA and issues a certificate per node, valid for
// valid; files are the PEM files by name, order their names in the order
// to write them.
func issueCerts(nodes []string, hosts map[string][]string, valid time.Duration) (ca *pki.CA, files map[string][]byte, order []string, err error) {
	files = map[string][]byte{}
	order = []string{"ca.pem", "ca-key.pem"}
	ca, err = pki.NewCA("tokenmesh CA", valid)
	if err != nil {
		return nil, nil, nil, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, nil, nil, err
	}
	files["ca.pem"], files["ca-key.pem"] = ca.CertPEM, caKey
	for _, n := range nodes {
		iss, err := ca.Issue(n, valid, hosts[n]...)
		if err != nil {
			return nil, nil, nil, err
		}
		files[n+".pem"], files[n+"-key.pem"] = iss.CertPEM, iss.KeyPEM
		order = append(order, n+".pem", n+"-key.pem")
	}
	return ca, files, order, nil
}

// writeCertFiles writes files, in order, to the directory out (created
// if missing), the keys 0600; it writes nothing if one of them exists.
func writeCertFiles(out string, files map[string][]byte, order []string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for _, name := range order { // refuse before writing anything
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			return fmt.Errorf("--out: %s already exists; not overwriting (remove it or choose another directory)", filepath.Join(out, name))
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--out: %w", err)
		}
	}
	for _, name := range order {
		if err := writeCertFile(out, name, files[name]); err != nil {
			return err
		}
	}
	return nil
}

// writeCertFile creates the file name in out, which must not exist, with
// data: 0600 for a key, 0644 else.
func writeCertFile(out, name string, data []byte) error {
	mode := os.FileMode(0o644)
	if strings.HasSuffix(name, "-key.pem") {
		mode = 0o600
	}
	f, err := os.OpenFile(filepath.Join(out, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--out: %s: %w", name, err)
	}
	return nil
}
