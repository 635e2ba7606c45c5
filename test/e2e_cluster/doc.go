// Package e2ecluster runs a cluster of machines, each booted with systemd
// as PID 1, bootstrapped with kubeadm init and join, critlet installed from
// its package with apt as an operator installs it: the operator's path on
// real machines. Its tests (build tag e2ecluster, make test-e2e-cluster)
// need root and what make builds; see docs/cluster.md.
package e2ecluster
