// Package e2ekubeadm bootstraps a node with kubeadm whose kubelet is
// critlet, or the stock kubelet, installed as its package installs it: the
// node e2e suite of the project's most common operator path. Its tests
// (build tag e2ekubeadm, make test-e2e-kubeadm) need root, containerd and
// the binaries make builds; see docs/e2e-kubeadm.md.
package e2ekubeadm
