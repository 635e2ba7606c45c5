//go:build tools

package main

// The module graph must hold every package of upstream's node e2e test
// binary, which is compiled from the pinned module with go test -c.
import (
	_ "k8s.io/kubernetes/test/e2e_node"
)
