//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
)

// controlPlane are the static pods kubeadm init writes.
var controlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// mirrorAnnotation marks a mirror pod: the API's copy of a static pod.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// checkControlPlane waits until each control-plane static pod's mirror
// pod is Running.
func (kn *kubeadmNode) checkControlPlane() {
	kn.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(kn.ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var missing []string
		for _, c := range controlPlane {
			p, err := kn.client.CoreV1().Pods("kube-system").Get(ctx, c+"-"+nodeName, metav1.GetOptions{})
			switch {
			case err != nil:
				missing = append(missing, fmt.Sprintf("%s: %v", c, err))
			case p.Annotations[mirrorAnnotation] == "":
				missing = append(missing, c+": not a mirror pod")
			case p.Status.Phase != v1.PodRunning:
				missing = append(missing, fmt.Sprintf("%s: %s", c, p.Status.Phase))
			}
		}
		last = strings.Join(missing, "; ")
		return len(missing) == 0, nil
	})
	if err != nil {
		kn.t.Fatalf("control plane's mirror pods not all Running within 3m: %s", last)
	}
}

// checkKubeletCredentials checks the kubelet's client credentials: a
// certificate for the node's identity, issued by the cluster's CA, kept by
// the kubelet's certificate manager as kubelet-client-current.pem, to
// which kubeadm's kubelet-finalize pointed kubelet.conf, so that the
// kubelet rotates it. It returns what it found, the CSRs the kubelet's
// client signer issued included (on `kubeadm init` kubeadm signs the
// node's first certificate itself; TLS bootstrap with a token is `kubeadm
// join`'s, and a rotation comes at 70-90% of the year it is valid).
func (kn *kubeadmNode) checkKubeletCredentials() string {
	kn.t.Helper()
	cfg := kn.node.Config()
	current := filepath.Join(cfg.KubeletRootMount(), "pki", "kubelet-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil {
		kn.t.Fatalf("the kubelet's rotatable client certificate: %v", err)
	}
	// The link names its target as the kubelet sees it, inside the node.
	rel, ok := strings.CutPrefix(target, "/var/lib/kubelet/")
	if !ok {
		kn.t.Fatalf("%s links to %s, not under /var/lib/kubelet", current, target)
	}
	cert := firstCertificate(kn, filepath.Join(cfg.KubeletRootMount(), rel))
	ca := firstCertificate(kn, filepath.Join(cfg.PrivateDir("/etc/kubernetes"), "pki", "ca.crt"))
	if want := "system:node:" + nodeName; cert.Subject.CommonName != want || !slices.Contains(cert.Subject.Organization, "system:nodes") {
		kn.t.Errorf("kubelet client certificate is for %s %v, want %s in system:nodes", cert.Subject.CommonName, cert.Subject.Organization, want)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		kn.t.Errorf("kubelet client certificate not issued by the cluster's CA: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(cfg.PrivateDir("/etc/kubernetes"), "kubelet.conf"))
	if err != nil {
		kn.t.Fatal(err)
	}
	for name, a := range kc.AuthInfos {
		if a.ClientCertificate != "/var/lib/kubelet/pki/kubelet-client-current.pem" || len(a.ClientCertificateData) > 0 {
			kn.t.Errorf("kubelet.conf user %s uses certificate %q (and %d bytes inline), want the rotatable /var/lib/kubelet/pki/kubelet-client-current.pem alone", name, a.ClientCertificate, len(a.ClientCertificateData))
		}
	}
	csrs, err := kn.client.CertificatesV1().CertificateSigningRequests().List(kn.ctx, metav1.ListOptions{})
	if err != nil {
		kn.t.Fatal(err)
	}
	issued := 0
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && len(csr.Status.Certificate) > 0 {
			issued++
		}
	}
	return fmt.Sprintf("kubelet-client-current.pem -> %s: %s, issued by %s, valid until %s; kubelet client CSRs issued: %d",
		target, cert.Subject.CommonName, ca.Subject.CommonName, cert.NotAfter.UTC().Format(time.DateOnly), issued)
}

// firstCertificate reads the first certificate of a PEM file.
func firstCertificate(kn *kubeadmNode, path string) *x509.Certificate {
	kn.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		kn.t.Fatal(err)
	}
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				kn.t.Fatalf("%s: %v", path, err)
			}
			return c
		}
	}
	kn.t.Fatalf("%s holds no certificate", path)
	return nil
}

// waitServiceAccounts waits for the controller manager to create the
// default service account in the namespaces the scenarios use: the API
// server refuses pods until then.
func (kn *kubeadmNode) waitServiceAccounts(namespaces ...string) {
	kn.t.Helper()
	for _, ns := range namespaces {
		var last error
		if err := wait.PollUntilContextTimeout(kn.ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = kn.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return last == nil, nil
		}); err != nil {
			kn.t.Fatalf("no default service account in %s within 2m: %v", ns, last)
		}
	}
}
