package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pkiutil"
)

var (
	serverUsage = x509.ExtKeyUsageServerAuth
	clientUsage = x509.ExtKeyUsageClientAuth
)

// leafSpec is what a certificate signed by the CA must say.
type leafSpec struct {
	certFile, keyFile string
	commonName        string
	orgs              []string
	usage             x509.ExtKeyUsage
	dnsNames          []string
	ips               []net.IP
}

// pair is a certificate with its private key.
type pair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// ensureCA returns the CA, creating a new one when the files on disk are
// not a usable CA at now. isNew reports that every leaf must be signed again.
func (s *Set) ensureCA(now time.Time) (ca *pair, isNew bool, err error) {
	p, err := s.loadPair(s.CAFile, s.CAKeyFile)
	if err != nil {
		return nil, false, err
	}
	if p != nil && caUsable(p.cert, now) {
		return p, false, nil
	}
	p, err = newCA(now)
	if err != nil {
		return nil, false, err
	}
	if err := s.writePair(s.CAFile, s.CAKeyFile, p); err != nil {
		return nil, false, err
	}
	return p, true, nil
}

func caUsable(c *x509.Certificate, now time.Time) bool {
	return c.IsCA && c.BasicConstraintsValid &&
		c.KeyUsage&x509.KeyUsageCertSign != 0 &&
		// Only a self-signed root can serve as the whole --client-ca-file.
		c.CheckSignatureFrom(c) == nil &&
		timely(c, now)
}

// timely reports that c is valid at now and not about to expire.
func timely(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotBefore) && now.Add(renewBefore).Before(c.NotAfter)
}

// ensureLeaf keeps the certificate described by spec if it still matches,
// and otherwise signs a new one with a new key.
func (s *Set) ensureLeaf(ca *pair, caIsNew bool, spec leafSpec, now time.Time) error {
	// Leaves of a replaced CA would fail verification below anyway; not
	// loading them makes the rule explicit.
	if !caIsNew {
		p, err := s.loadPair(spec.certFile, spec.keyFile)
		if err != nil {
			return err
		}
		if p != nil && leafMatches(p.cert, ca.cert, spec, now) {
			return nil
		}
	}
	p, err := newLeaf(ca, spec, now)
	if err != nil {
		return fmt.Errorf("pki: signing %s: %w", filepath.Base(spec.certFile), err)
	}
	return s.writePair(spec.certFile, spec.keyFile, p)
}

func leafMatches(c, caCert *x509.Certificate, spec leafSpec, now time.Time) bool {
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	opts := x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{spec.usage},
	}
	if _, err := c.Verify(opts); err != nil {
		return false
	}
	return timely(c, now) &&
		!c.IsCA &&
		slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{spec.usage}) &&
		c.Subject.CommonName == spec.commonName &&
		slices.Equal(c.Subject.Organization, spec.orgs) &&
		sameSet(c.DNSNames, spec.dnsNames) &&
		sameSet(ipStrings(c.IPAddresses), ipStrings(spec.ips)) &&
		len(c.EmailAddresses) == 0 && len(c.URIs) == 0
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// ipStrings normalises IPs so that 4- and 16-byte forms of one IPv4
// address compare equal.
func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// newCA makes the CA as kubeadm makes a cluster's (pkiutil), with an ECDSA
// key and this node's validity.
func newCA(now time.Time) (*pair, error) {
	cert, key, err := pkiutil.NewCertificateAuthority(&pkiutil.CertConfig{
		Config:              certutil.Config{CommonName: caCommonName, NotBefore: now.Add(-backdate)},
		NotAfter:            now.Add(caValidity),
		EncryptionAlgorithm: kubeadmapi.EncryptionAlgorithmECDSAP256,
	})
	if err != nil {
		return nil, fmt.Errorf("pki: making the CA: %w", err)
	}
	return &pair{cert: cert, key: key}, nil
}

// newLeaf signs a certificate for spec with a new key, as kubeadm signs
// its certificates (pkiutil).
func newLeaf(ca *pair, spec leafSpec, now time.Time) (*pair, error) {
	// A leaf outliving its CA would only look valid.
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	cert, key, err := pkiutil.NewCertAndKey(ca.cert, ca.key, &pkiutil.CertConfig{
		Config: certutil.Config{
			CommonName:   spec.commonName,
			Organization: spec.orgs,
			AltNames:     certutil.AltNames{DNSNames: spec.dnsNames, IPs: spec.ips},
			Usages:       []x509.ExtKeyUsage{spec.usage},
			NotBefore:    now.Add(-backdate),
		},
		NotAfter:            notAfter,
		EncryptionAlgorithm: kubeadmapi.EncryptionAlgorithmECDSAP256,
	})
	if err != nil {
		return nil, err
	}
	return &pair{cert: cert, key: key}, nil
}

// loadPair reads a certificate and its key. It returns a nil pair, and no
// error, when either file is missing or unparsable or the two do not belong
// together: all cases in which the pair must be made again.
func (s *Set) loadPair(certFile, keyFile string) (*pair, error) {
	certPEM, err := readOptional(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readOptional(keyFile)
	if err != nil {
		return nil, err
	}
	if certPEM == nil || keyPEM == nil {
		return nil, nil
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, nil
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil
	}
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, nil
	}
	if err := restrictKey(keyFile); err != nil {
		return nil, err
	}
	return &pair{cert: cert, key: key}, nil
}

// parseCert accepts exactly one PEM certificate, the form writePair
// produces; anything else is rewritten rather than guessed at.
func parseCert(data []byte) (*x509.Certificate, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("data after the certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(data []byte) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported private key type %T", k)
	}
	return signer, nil
}

// writePair writes the key before the certificate. If the process dies in
// between, the next Ensure finds a key that does not match the certificate
// and makes both again.
func (s *Set) writePair(certFile, keyFile string, p *pair) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(p.key)
	if err != nil {
		return fmt.Errorf("pki: encoding %s: %w", filepath.Base(keyFile), err)
	}
	if err := s.write(keyFile, keyPEM, privateKeyMode); err != nil {
		return err
	}
	return s.write(certFile, pkiutil.EncodeCertPEM(p.cert), publicFileMode)
}
