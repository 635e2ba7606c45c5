package pki

import (
	"bytes"
	"crypto"
	"fmt"

	"k8s.io/client-go/util/keyutil"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pkiutil"
)

// ensureServiceAccountKey keeps the signing key whenever it parses, since a
// new one invalidates every token already handed out, and rewrites the public key file
// whenever it differs from the signing key's public half.
func (s *Set) ensureServiceAccountKey() error {
	keyPEM, err := readOptional(s.ServiceAccountKeyFile)
	if err != nil {
		return err
	}
	var pub crypto.PublicKey
	if key, err := parseKey(keyPEM); err == nil {
		if err := restrictKey(s.ServiceAccountKeyFile); err != nil {
			return err
		}
		pub = key.Public()
	} else {
		// RSA rather than ECDSA: RS256 is the one algorithm every
		// verifier of service-account tokens supports.
		key, err := pkiutil.NewPrivateKey(kubeadmapi.EncryptionAlgorithmRSA2048)
		if err != nil {
			return fmt.Errorf("pki: generating %s: %w", serviceAccountKeyName, err)
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return fmt.Errorf("pki: encoding %s: %w", serviceAccountKeyName, err)
		}
		if err := s.write(s.ServiceAccountKeyFile, keyPEM, privateKeyMode); err != nil {
			return err
		}
		pub = key.Public()
	}

	want, err := pkiutil.EncodePublicKeyPEM(pub)
	if err != nil {
		return fmt.Errorf("pki: encoding %s: %w", serviceAccountPubKeyName, err)
	}
	have, err := readOptional(s.ServiceAccountPublicKeyFile)
	if err != nil {
		return err
	}
	if bytes.Equal(have, want) {
		return nil
	}
	return s.write(s.ServiceAccountPublicKeyFile, want, publicFileMode)
}
