package localnode

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/critlet/critlet/internal/localnode/process"
)

func (n *Node) startEtcd(ctx context.Context) error {
	if err := n.l.mkdirAll(n.l.etcdData(), 0o700); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	client := "http://127.0.0.1:" + strconv.Itoa(n.cfg.Ports.EtcdClient)
	peer := "http://127.0.0.1:" + strconv.Itoa(n.cfg.Ports.EtcdPeer)
	h, err := n.start(process.Spec{
		Name: Etcd,
		Path: filepath.Join(n.cfg.BinDir, "etcd"),
		Args: []string{
			"--name=critlet",
			"--data-dir=" + n.l.etcdData(),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=critlet=" + peer,
			// A test node's data is disposable; fsync would only slow it down.
			"--unsafe-no-fsync",
			"--log-level=warn",
		},
	})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, h, 60*time.Second, "healthy", n.etcdHealthy); err != nil {
		return err
	}
	return checkListener(Etcd, n.cfg.Ports.EtcdClient, h.PID)
}

// etcdHealthy asks etcd's /health.
func (n *Node) etcdHealthy(ctx context.Context) error {
	return httpOK(ctx, "http://127.0.0.1:"+strconv.Itoa(n.cfg.Ports.EtcdClient)+"/health")
}

// httpOK gets url and wants 200 OK.
func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func (n *Node) startAPIServer(ctx context.Context) error {
	p := n.pki
	h, err := n.start(process.Spec{
		Name: APIServer,
		Path: filepath.Join(n.cfg.BinDir, "kube-apiserver"),
		Args: []string{
			"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(n.cfg.Ports.EtcdClient),
			"--bind-address=127.0.0.1",
			// A loopback advertise address is only accepted when the apiserver
			// does not reconcile the kubernetes service's endpoints itself.
			"--advertise-address=127.0.0.1",
			"--endpoint-reconciler-type=none",
			"--secure-port=" + strconv.Itoa(n.cfg.Ports.APIServer),
			"--cert-dir=" + n.l.path("apiserver"),
			"--client-ca-file=" + p.CAFile,
			"--tls-cert-file=" + p.ServingCertFile,
			"--tls-private-key-file=" + p.ServingKeyFile,
			"--kubelet-client-certificate=" + p.APIServerKubeletClientCertFile,
			"--kubelet-client-key=" + p.APIServerKubeletClientKeyFile,
			"--authorization-mode=Node,RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.ServiceAccountPublicKeyFile,
			"--service-account-signing-key-file=" + p.ServiceAccountKeyFile,
			"--service-cluster-ip-range=10.0.0.0/24",
			// Priority resolves priorityClassName to spec.priority: the API
			// server's half of critical-pod handling. No controller manager
			// creates default service accounts, so ServiceAccount is off.
			"--enable-admission-plugins=NodeRestriction,Priority",
			"--disable-admission-plugins=ServiceAccount",
			"--allow-privileged=true",
			"--profiling=false",
			"--v=1",
		},
	})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, h, 120*time.Second, "ready", n.apiServerReady); err != nil {
		return err
	}
	return checkListener(APIServer, n.cfg.Ports.APIServer, h.PID)
}

// apiServerReady asks the API server's /readyz.
func (n *Node) apiServerReady(ctx context.Context) error {
	_, err := n.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}
