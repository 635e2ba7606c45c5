//go:build critlet_patch

package kubelet

// Device re-admission under the topology manager's restricted and
// single-numa-node policies. A plugin registered with no healthy device
// (a GPU still initializing after a reboot) gives the device manager no
// topology hint for its resource, and the topology manager refuses the pod
// (TopologyAffinityError) before the device manager would have refused it
// for the plugin ("no healthy devices present"). That refusal names no
// resource: the pod waits for each resource it requests that the device
// manager knows with no healthy device.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	devicecheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/critlet/critlet/pkg/devicedemand"
	"github.com/critlet/critlet/pkg/devicewait"
)

// critletDeviceCheckpoint is the device manager's checkpoint: its
// directory is its plugins' socket directory, fixed upstream.
var critletDeviceCheckpoint = filepath.Join(pluginapi.DevicePluginPath, "kubelet_internal_checkpoint")

// critletCheckpointLimit bounds the checkpoint read: a few thousand
// devices' IDs take far less.
const critletCheckpointLimit = 16 << 20

// critletRegisteredDevices returns the resources the device manager's
// checkpoint lists (with their healthy devices' IDs, none for a plugin
// registered with no healthy device): the resources whose plugins
// registered in this kubelet's life, or in the one before and not yet
// past their grace period. No checkpoint is none registered. The file is
// read, never created, only if it is a regular file (device plugins may
// write in its directory), and its checksum is checked. (The container
// manager's capacity also lists them, but reading it forgets the plugins
// gone past their grace period, which the node status must be told.)
func critletRegisteredDevices() (map[string][]string, error) {
	f, err := os.OpenFile(critletDeviceCheckpoint, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("device manager checkpoint %s: not a regular file (%v)", critletDeviceCheckpoint, err)
	}
	blob, err := io.ReadAll(io.LimitReader(f, critletCheckpointLimit+1))
	if err != nil {
		return nil, err
	}
	if len(blob) > critletCheckpointLimit {
		return nil, fmt.Errorf("device manager checkpoint %s: larger than %d bytes", critletDeviceCheckpoint, critletCheckpointLimit)
	}
	cp := devicecheckpoint.New(nil, nil)
	if err := cp.UnmarshalCheckpoint(blob); err != nil {
		return nil, fmt.Errorf("device manager checkpoint %s: %w", critletDeviceCheckpoint, err)
	}
	if err := cp.VerifyChecksum(); err != nil {
		return nil, fmt.Errorf("device manager checkpoint %s: %w", critletDeviceCheckpoint, err)
	}
	_, registered := cp.GetData()
	return registered, nil
}

// critletReadRegisteredDevices is critletRegisteredDevices; tests replace it.
var critletReadRegisteredDevices = critletRegisteredDevices

// critletAwayPlugins returns the resources pod waits for when admission
// refused it with reason and message because device plugins are away:
// the resource the device manager's refusal names, or, for the topology
// manager's refusal, each requested resource the device manager knows
// with no healthy device, within the window. None for any other refusal,
// or when the device manager's checkpoint cannot be read (the pod is then
// refused as upstream refuses it).
func (kl *Kubelet) critletAwayPlugins(logger klog.Logger, pod *v1.Pod, reason, message string) []string {
	switch reason {
	case lifecycle.UnexpectedAdmissionError:
		if away, ok := devicewait.AwayPlugin(message); ok {
			return []string{away}
		}
	case topologymanager.ErrorTopologyAffinity:
		// Only while the window is open: with it closed (or never open,
		// device re-admission off) nothing is held for a plugin anyway.
		if h := kl.critletHeldForDevices(); h == nil || !kl.clock.Now().Before(h.Closes()) {
			return nil
		}
		registered, err := critletReadRegisteredDevices()
		if err != nil {
			logger.Error(err, "Cannot tell whether a topology refusal is for device plugins not back yet; refusing the pod as upstream", "pod", klog.KObj(pod))
			return nil
		}
		known := func(r string) bool { _, ok := registered[r]; return ok }
		containers := devicedemand.Containers(pod, known, func(string) map[string]int64 { return nil })
		return devicewait.WithoutHealthyDevices(containers, kl.critletHealthyDevices(logger))
	}
	return nil
}
