//go:build e2ekubeadm

package e2ekubeadm

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/critlet/critlet/internal/hoststate"
	"github.com/critlet/critlet/internal/localnode"
)

// TestKubeadm bootstraps a node with `kubeadm init` once per kubelet, each
// installed as its package installs it, and runs on it:
//
//  1. init: kubeadm's success, the node Ready (timed from the start of
//     init), the control plane's mirror pods Running, the kubelet's client
//     certificate for the node, from the cluster's CA, rotatable;
//  3. a static pod refused for room, then room made: critlet with
//     --critical-static-pod-readmission (set in /etc/default/kubelet)
//     runs it, the stock kubelet leaves it Failed;
//  2. a control-plane upgrade on a full node: kube-scheduler's manifest
//     rewritten with a larger cpu request; its victims are upstream's;
//
// then `kubeadm reset`, which must leave nothing, and the node's removal,
// after which the host must be as before.
func TestKubeadm(t *testing.T) {
	// Checked before anything is written there, and used by its resolved
	// path from here on.
	state, roots, err := prepareState(*stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	out, err := exec.Command(filepath.Join(*binDir, "kubeadm"), "version", "-o", "short").Output()
	if err != nil {
		t.Fatalf("kubeadm version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	crit, err := installCritlet(roots["critlet"])
	if err != nil {
		t.Fatal(err)
	}
	stock, err := installStock(roots["stock"], crit.root)
	if err != nil {
		t.Fatal(err)
	}
	var report []string
	for _, k := range []installed{stock, crit} {
		t.Run(k.name, func(t *testing.T) {
			before, err := hoststate.CaptureNode(localnode.CgroupRoot, state.Path())
			if err != nil {
				t.Fatal(err)
			}
			// A cleanup, so that a failed run is checked too; registered
			// before the node's, it runs after the node is removed.
			t.Cleanup(func() {
				after, err := hoststate.CaptureNode(localnode.CgroupRoot, state.Path())
				if err != nil {
					t.Fatal(err)
				}
				if diff := hoststate.Diff(before, after); len(diff) > 0 {
					t.Errorf("the host changed:\n  %s", strings.Join(diff, "\n  "))
				}
			})
			// Everything the suite waits for ends before go test's own
			// timeout, which would end the process without its cleanups.
			ctx := context.Background()
			if d, ok := t.Deadline(); ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, d.Add(-2*time.Minute))
				defer cancel()
			}
			func() {
				kn := upNode(t, ctx, state, k, version)
				ready := kn.init()
				kn.checkControlPlane()
				creds := kn.checkKubeletCredentials()
				kn.untaint()
				kn.waitServiceAccounts("default", "kube-system")
				row := []string{fmt.Sprintf("%s: kubeadm init to node Ready in %s; %s", k.name, ready.Round(100*time.Millisecond), creds)}
				readmit := k.name == "critlet"
				if readmit {
					kn.enableReadmission()
				}
				row = append(row, "scenario 3: "+kn.readmissionOnKubeadmNode(readmit))
				row = append(row, "scenario 2: "+kn.upgradeOnFullNode())
				row = append(row, kn.reset())
				starts, exits := kn.svc.started()
				row = append(row, fmt.Sprintf("the kubelet unit was started %d times (Restart=always, RestartSec=%s); runs ended: %s", starts, kn.svc.delay, strings.Join(exits, "; ")))
				kn.down()
				for _, r := range row {
					t.Log(r)
				}
				report = append(report, row...)
			}()
		})
	}
	if err := writeReport(state, report); err != nil {
		t.Error(err)
	}
}
