// Package packagetest checks critlet's packages (make package): their
// metadata and files as dpkg and rpm read them; installs, upgrades,
// removals and swaps with the stock kubelet package in a scratch root; the
// command systemd would start beside kubeadm's drop-in; and that they are
// reproducible. The tests of the shipped unit and settings files run in
// make test-unit; the others need the packages and the tag packagecheck:
//
//	make package && go test -tags packagecheck ./test/package/
package packagetest
