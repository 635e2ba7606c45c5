package pki

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/critlet/critlet/internal/atomicfile"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig atomically writes a kubeconfig, mode 0600, whose only
// context connects to server as user, trusting the CA in caFile and
// presenting the client certificate in certFile and keyFile. The three files
// are referenced, not embedded, so they must be absolute paths: clientcmd
// would resolve relative ones against the kubeconfig's directory.
func WriteKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	data, err := kubeconfig(server, caFile, certFile, keyFile, user)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, privateKeyMode)
}

// ensureKubeconfig rewrites path unless it already holds exactly what
// WriteKubeconfig would write. Encoding is deterministic, so comparing bytes
// catches a changed server, user or path as well as corruption and edits.
func (s *Set) ensureKubeconfig(path, server, certFile, keyFile, user string) error {
	want, err := kubeconfig(server, s.CAFile, certFile, keyFile, user)
	if err != nil {
		return err
	}
	have, err := readOptional(path)
	if err != nil {
		return err
	}
	if bytes.Equal(have, want) {
		return restrictKey(path)
	}
	return s.write(path, want, privateKeyMode)
}

func kubeconfig(server, caFile, certFile, keyFile, user string) ([]byte, error) {
	for _, f := range []string{caFile, certFile, keyFile} {
		if !filepath.IsAbs(f) {
			return nil, fmt.Errorf("pki: kubeconfig for %s: %q is not an absolute path", user, f)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigClusterName] = &clientcmdapi.Cluster{
		Server:               server,
		CertificateAuthority: caFile,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificate: certFile,
		ClientKey:         keyFile,
	}
	cfg.Contexts[kubeconfigContextName] = &clientcmdapi.Context{
		Cluster:  kubeconfigClusterName,
		AuthInfo: user,
	}
	cfg.CurrentContext = kubeconfigContextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("pki: encoding kubeconfig for %s: %w", user, err)
	}
	return data, nil
}
