// Package pki creates the certificates, keys and kubeconfigs of a Kubernetes
// control plane that listens only on loopback: one CA, which both signs the
// kube-apiserver serving certificate and authenticates clients
// (--client-ca-file); client certificates for an administrator, for the
// kubelet and for the apiserver's own calls to the kubelet; and the
// service-account signing key.
//
// Everything lives in one directory. Ensure is idempotent: files that are
// still right are left untouched, so processes that have already read them
// keep working. Ensure must not run concurrently on the same directory.
package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// AdminUser is the identity in the admin kubeconfig. It is in
	// system:masters, which bypasses authorization entirely.
	AdminUser = "critlet-admin"

	// ServiceIP is the first address of kube-apiserver's default
	// --service-cluster-ip-range (10.0.0.0/24); in-cluster clients reach the
	// apiserver there as kubernetes.default.
	ServiceIP = "10.0.0.1"
)

// Names of the files inside the directory passed to Ensure.
const (
	caCertName               = "ca.crt"
	caKeyName                = "ca.key"
	servingCertName          = "apiserver.crt"
	servingKeyName           = "apiserver.key"
	kubeletClientCertName    = "apiserver-kubelet-client.crt"
	kubeletClientKeyName     = "apiserver-kubelet-client.key"
	adminCertName            = "admin.crt"
	adminKeyName             = "admin.key"
	adminKubeconfigName      = "admin.kubeconfig"
	nodeCertName             = "kubelet-client.crt"
	nodeKeyName              = "kubelet-client.key"
	kubeletKubeconfigName    = "kubelet.kubeconfig"
	serviceAccountKeyName    = "sa.key"
	serviceAccountPubKeyName = "sa.pub"
)

// Identities and names baked into the certificates and kubeconfigs.
const (
	caCommonName             = "critlet-ca"
	apiserverCommonName      = "kube-apiserver"
	apiserverKubeletClientCN = "kube-apiserver-kubelet-client"
	mastersGroup             = "system:masters"
	nodesGroup               = "system:nodes"
	nodeUserPrefix           = "system:node:"
	clusterDomain            = "cluster.local"
	kubeconfigClusterName    = "critlet"
	kubeconfigContextName    = "critlet"
)

const (
	privateKeyMode = 0o600
	publicFileMode = 0o644
	dirMode        = 0o700

	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// renewBefore leaves a day for components to pick up a renewed file
	// before the old one stops working.
	renewBefore = 24 * time.Hour
	// backdate tolerates clocks of other processes or machines that run a
	// little behind the one that signed.
	backdate = time.Hour
)

// Set holds the absolute paths of the files Ensure manages.
type Set struct {
	// CAFile is the CA certificate: kube-apiserver's --client-ca-file and
	// the kubelet's --client-ca-file, and the trust root of both kubeconfigs.
	CAFile    string
	CAKeyFile string

	// ServingCertFile and ServingKeyFile are kube-apiserver's
	// --tls-cert-file and --tls-private-key-file.
	ServingCertFile string
	ServingKeyFile  string

	// AdminKubeconfig authenticates as AdminUser in system:masters.
	AdminKubeconfig string

	// KubeletKubeconfig authenticates as system:node:<nodeName> in
	// system:nodes, the identity the Node authorizer expects.
	KubeletKubeconfig string

	// APIServerKubeletClientCertFile and APIServerKubeletClientKeyFile are
	// kube-apiserver's --kubelet-client-certificate and --kubelet-client-key.
	APIServerKubeletClientCertFile string
	APIServerKubeletClientKeyFile  string

	// ServiceAccountKeyFile is kube-apiserver's
	// --service-account-signing-key-file; ServiceAccountPublicKeyFile is its
	// --service-account-key-file.
	ServiceAccountKeyFile       string
	ServiceAccountPublicKeyFile string

	// Written lists, in order, the files this call of Ensure created or
	// replaced; it is empty when everything was reused. Callers can use it
	// to decide whether running components must be restarted.
	Written []string

	adminCertFile, adminKeyFile string
	nodeCertFile, nodeKeyFile   string
}

// Ensure creates, or reuses when still valid at now, the control plane's
// certificates, keys and kubeconfigs in dir. server is the apiserver URL
// written into the kubeconfigs, for example https://127.0.0.1:16443; its host
// is also added to the serving certificate. nodeName is the kubelet's node.
//
// A file is replaced only when it is missing, unparsable, not signed by the
// current CA, not valid at now or expiring within 24 hours of it, or no
// longer matches the wanted identity, names or server. A new CA replaces
// every certificate it signed. The service-account key does not depend on
// the CA and is kept, so existing tokens stay valid.
//
// Kubeconfigs refer to the certificate and key files by absolute path
// rather than embedding them.
func Ensure(dir, server, nodeName string, now time.Time) (*Set, error) {
	if errs := validation.IsDNS1123Subdomain(nodeName); len(errs) > 0 {
		return nil, fmt.Errorf("pki: invalid node name %q: %s", nodeName, strings.Join(errs, "; "))
	}
	host, err := serverHost(server)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pki: resolving directory: %w", err)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("pki: creating directory: %w", err)
	}
	// Its files are written by path: a link here would have them, and
	// the chmod below, land where it points.
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	} else if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("pki: %s is a symbolic link, not a directory of its own: remove it", dir)
	}
	// MkdirAll leaves an existing directory's mode alone, and this one holds
	// private keys.
	if err := os.Chmod(dir, dirMode); err != nil {
		return nil, fmt.Errorf("pki: restricting directory: %w", err)
	}

	s := newSet(dir)
	ca, caIsNew, err := s.ensureCA(now)
	if err != nil {
		return nil, err
	}
	for _, spec := range s.leaves(nodeName, host) {
		if err := s.ensureLeaf(ca, caIsNew, spec, now); err != nil {
			return nil, err
		}
	}
	if err := s.ensureServiceAccountKey(); err != nil {
		return nil, err
	}
	if err := s.ensureKubeconfig(s.AdminKubeconfig, server, s.adminCertFile, s.adminKeyFile, AdminUser); err != nil {
		return nil, err
	}
	if err := s.ensureKubeconfig(s.KubeletKubeconfig, server, s.nodeCertFile, s.nodeKeyFile, nodeUserPrefix+nodeName); err != nil {
		return nil, err
	}
	return s, nil
}

func newSet(dir string) *Set {
	p := func(name string) string { return filepath.Join(dir, name) }
	return &Set{
		CAFile:                         p(caCertName),
		CAKeyFile:                      p(caKeyName),
		ServingCertFile:                p(servingCertName),
		ServingKeyFile:                 p(servingKeyName),
		AdminKubeconfig:                p(adminKubeconfigName),
		KubeletKubeconfig:              p(kubeletKubeconfigName),
		APIServerKubeletClientCertFile: p(kubeletClientCertName),
		APIServerKubeletClientKeyFile:  p(kubeletClientKeyName),
		ServiceAccountKeyFile:          p(serviceAccountKeyName),
		ServiceAccountPublicKeyFile:    p(serviceAccountPubKeyName),
		adminCertFile:                  p(adminCertName),
		adminKeyFile:                   p(adminKeyName),
		nodeCertFile:                   p(nodeCertName),
		nodeKeyFile:                    p(nodeKeyName),
	}
}

// serverHost checks the apiserver URL and returns its host without port.
func serverHost(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("pki: parsing server URL: %w", err)
	}
	if u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("pki: server URL %q must be https://host[:port]", server)
	}
	return strings.ToLower(u.Hostname()), nil
}

// leaves describes every certificate the CA signs.
func (s *Set) leaves(nodeName, serverHost string) []leafSpec {
	serving := leafSpec{
		certFile:   s.ServingCertFile,
		keyFile:    s.ServingKeyFile,
		commonName: apiserverCommonName,
		usage:      serverUsage,
		dnsNames: []string{
			"localhost",
			"kubernetes",
			"kubernetes.default",
			"kubernetes.default.svc",
			"kubernetes.default.svc." + clusterDomain,
		},
		ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(ServiceIP)},
	}
	// Clients verify the host they dial, so whatever the kubeconfigs name
	// (say [::1]) must be covered too.
	if ip := net.ParseIP(serverHost); ip != nil {
		if !slices.ContainsFunc(serving.ips, ip.Equal) {
			serving.ips = append(serving.ips, ip)
		}
	} else if !slices.Contains(serving.dnsNames, serverHost) {
		serving.dnsNames = append(serving.dnsNames, serverHost)
	}

	return []leafSpec{
		serving,
		{
			certFile:   s.APIServerKubeletClientCertFile,
			keyFile:    s.APIServerKubeletClientKeyFile,
			commonName: apiserverKubeletClientCN,
			orgs:       []string{mastersGroup},
			usage:      clientUsage,
		},
		{
			certFile:   s.adminCertFile,
			keyFile:    s.adminKeyFile,
			commonName: AdminUser,
			orgs:       []string{mastersGroup},
			usage:      clientUsage,
		},
		{
			certFile:   s.nodeCertFile,
			keyFile:    s.nodeKeyFile,
			commonName: nodeUserPrefix + nodeName,
			orgs:       []string{nodesGroup},
			usage:      clientUsage,
		},
	}
}

// readOptional reads path, returning nil data and no error when it does not
// exist: a missing file is simply one to create. Other errors (permissions,
// I/O) are returned so that a file that may be fine is never overwritten.
func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pki: reading %s: %w", filepath.Base(path), err)
	}
	return data, nil
}
