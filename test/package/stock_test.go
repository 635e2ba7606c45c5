//go:build packagecheck

package packagetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Stand-ins for the stock kubelet and kubeadm packages (pkgs.k8s.io),
// built with nfpm: their files where the real ones have them, and the
// kubelet's maintainer scripts as the real packages carry them
// (testdata/stock).
//
// kubernetes/release builds both formats on the OBS from one spec,
// cmd/krel/templates/latest/kubelet/kubelet.spec, whose scripts are
//
//	%preun  %systemd_preun kubelet.service
//	%post   %systemd_post kubelet.service
//	%postun %systemd_postun kubelet.service
//
// (no restart on upgrade: %systemd_postun, not _with_restart). The .rpm
// expands them with systemd's rpm macros (src/rpm/macros.systemd.in,
// calling src/rpm/systemd-update-helper.in, whose commands
// testdata/stock/rpm runs inline): on install ($1 == 1) systemctl
// --no-reload preset; on removal ($1 == 0) systemctl --no-reload disable
// --now on a running systemd, disable alone otherwise; %systemd_postun
// checks its arguments only (systemd's file triggers reload). The .deb is
// built by debbuild, which writes "#!/bin/sh\nset -e\n\n" and the
// expansion by debbuild-macros' macros.systemd (systemd-deb-macros) as the
// postinst (on every configure, systemctl preset), prerm (on remove,
// systemctl --no-reload disable, then systemctl stop) and postrm
// (systemctl daemon-reload): testdata/stock/deb, byte for byte. debbuild's
// unit directory is /lib/systemd/system, where the kubeadm .deb's drop-in
// is too.
//
// The stand-ins' scripts call systemctl without regard for DPKG_ROOT, as
// the real ones do: they go into system roots only, where the scripts run
// chrooted with the fake systemctl.

const stockRelease = "1.1" // pkgs.k8s.io's first revision

// stockDebs returns the stand-in kubelet and kubeadm .debs.
func stockDebs(t *testing.T) (kubelet, kubeadm string) {
	t.Helper()
	dir := shared(t, "stock-deb", func(dir string) error {
		return buildStock(dir, "deb", "/lib/systemd/system", "/etc/default/kubelet", "kubelet (>= 1.19.0)", map[string]string{
			"postinstall": "testdata/stock/deb/postinst",
			"preremove":   "testdata/stock/deb/prerm",
			"postremove":  "testdata/stock/deb/postrm",
		})
	})
	return filepath.Join(dir, "kubelet.deb"), filepath.Join(dir, "kubeadm.deb")
}

// stockRPMs returns the stand-in kubelet and kubeadm .rpms.
func stockRPMs(t *testing.T) (kubelet, kubeadm string) {
	t.Helper()
	dir := shared(t, "stock-rpm", func(dir string) error {
		return buildStock(dir, "rpm", "/usr/lib/systemd/system", "/etc/sysconfig/kubelet", "kubelet >= 1.19.0", map[string]string{
			"postinstall": "testdata/stock/rpm/post",
			"preremove":   "testdata/stock/rpm/preun",
		})
	})
	return filepath.Join(dir, "kubelet.rpm"), filepath.Join(dir, "kubeadm.rpm")
}

func buildStock(dir, format, unitDir, settings, kubeadmDepends string, scripts map[string]string) error {
	upstream, err := upstreamVersion()
	if err != nil {
		return err
	}
	env := filepath.Join(dir, "kubelet.env")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(env, []byte("KUBELET_EXTRA_ARGS=\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return err
	}
	var scriptLines string
	for phase, file := range scripts {
		scriptLines += fmt.Sprintf("  %s: %s\n", phase, filepath.Join(repo, "test/package", file))
	}
	// debbuild keeps the empty directories with a file in each.
	keep := ""
	if format == "deb" {
		keep = fmt.Sprintf("  - {src: %s, dst: /var/lib/kubelet/.kubelet-keep, file_info: {mode: 0o644}}\n"+
			"  - {src: %s, dst: /etc/kubernetes/manifests/.kubelet-keep, file_info: {mode: 0o644}}\n", empty, empty)
	}
	configs := map[string]string{
		"kubelet": fmt.Sprintf(`name: kubelet
arch: %s
version: %s
release: "%s"
maintainer: test
description: stand-in for the stock kubelet package
contents:
  - {src: %s, dst: /usr/bin/kubelet, file_info: {mode: 0o755}}
  - {src: %s, dst: %s/kubelet.service, file_info: {mode: 0o644}}
  - {src: %s, dst: %s, type: config|noreplace, file_info: {mode: 0o644}}
  - {dst: /var/lib/kubelet, type: dir}
  - {dst: /etc/kubernetes/manifests, type: dir}
%sscripts:
%s`, runtime.GOARCH, upstream, stockRelease, stockBin, filepath.Join(repo, "build/systemd/kubelet.service"), unitDir,
			env, settings, keep, scriptLines),
		"kubeadm": fmt.Sprintf(`name: kubeadm
arch: %s
version: %s
release: "%s"
maintainer: test
description: stand-in for the stock kubeadm package
depends: ["%s"]
contents:
  - {src: %s, dst: %s/kubelet.service.d/10-kubeadm.conf, file_info: {mode: 0o644}}
`, runtime.GOARCH, upstream, stockRelease, kubeadmDepends, filepath.Join(repo, "test/package/testdata/10-kubeadm.conf"), unitDir),
	}
	for name, conf := range configs {
		cfg := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
			return err
		}
		cmd := exec.Command(nfpmBin, "package", "--config", cfg, "--packager", format, "--target", filepath.Join(dir, name+"."+format))
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("nfpm (%s %s): %w\n%s", name, format, err, out.String())
		}
	}
	return nil
}
