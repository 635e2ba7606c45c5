//go:build packagecheck

package packagetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const kubeletUnit = "kubelet.service"

// fakeSystemd is testdata/systemctl and testdata/journalctl installed in a
// system root, where the package scripts run chrooted and find them on
// their PATH.
type fakeSystemd struct {
	root  string // the root's directory
	state string // the fake's state directory, seen from the host
}

// installFakeSystemd puts the fake systemctl and journalctl in the root's
// /usr/bin. running marks a running systemd (/run/systemd/system); the
// preset policy is Debian's (no preset file: every unit enabled) or, with
// disableAll, Fedora's and RHEL's ("disable *").
func installFakeSystemd(t *testing.T, root string, running, disableAll bool) *fakeSystemd {
	t.Helper()
	for _, tool := range []string{"systemctl", "journalctl"} {
		writeFile(t, filepath.Join(root, "usr/bin", tool), readFile(t, filepath.Join("testdata", tool)))
		if err := os.Chmod(filepath.Join(root, "usr/bin", tool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The boot clock (see testdata/systemctl), booted long enough ago that
	// times aged by elapse stay after it.
	sd := &fakeSystemd{root: root, state: filepath.Join(root, "var/lib/fake-systemd")}
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sd.state, "boot"), strconv.FormatInt(time.Now().Unix()-1_000_000, 10)+"\n")
	if running {
		if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if disableAll {
		writeFile(t, filepath.Join(root, "usr/lib/systemd/system-preset/99-default-disable.preset"), "disable *\n")
	}
	return sd
}

// elapse lets d pass on the node: every time the scripts can read, the
// fake's records of stops (boot clock) and dpkg's records of packages
// (the modification times of /var/lib/dpkg/info's files), becomes d older.
func (f *fakeSystemd) elapse(t *testing.T, d time.Duration) {
	t.Helper()
	usec := d.Microseconds()
	older := func(s string) string {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < usec {
			t.Fatalf("fake systemd: cannot age the time %q by %v", s, d)
		}
		return strconv.FormatInt(n-usec, 10)
	}
	stopped, err := filepath.Glob(filepath.Join(f.state, "stopped", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range stopped {
		writeFile(t, file, older(strings.TrimSpace(readFile(t, file)))+"\n")
	}
	if journal := filepath.Join(f.state, "journal"); exists(journal) {
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSuffix(readFile(t, journal), "\n"), "\n") {
			at, unit, _ := strings.Cut(line, " ")
			b.WriteString(older(at) + " " + unit + "\n")
		}
		writeFile(t, journal, b.String())
	}
	info, err := os.ReadDir(filepath.Join(f.root, "var/lib/dpkg/info"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range info {
		file := filepath.Join(f.root, "var/lib/dpkg/info", e.Name())
		fi, err := os.Lstat(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, fi.ModTime().Add(-d), fi.ModTime().Add(-d)); err != nil {
			t.Fatal(err)
		}
	}
}

// journalOff makes journald keep nothing (Storage=none: no record from
// before either), or keep records again.
func (f *fakeSystemd) journalOff(t *testing.T, off bool) {
	t.Helper()
	file := filepath.Join(f.state, "journal-off")
	if !off {
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, file, "")
	if err := os.Remove(filepath.Join(f.state, "journal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// systemctl runs the fake in the root as an operator would (kubeadm join
// restarts the kubelet, for one).
func (f *fakeSystemd) systemctl(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{f.root, "/usr/bin/systemctl"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// calls is every systemctl call so far.
func (f *fakeSystemd) calls(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.state, "log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// complaints is what the fake says real systemd would not have done as
// asked.
func (f *fakeSystemd) complaints(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.state, "errors"))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// unitState is kubelet.service as an operator sees it.
type unitState struct {
	Exists  bool // a unit file
	Enabled bool // starts at boot
	Active  bool
	// Runs is, when active, the kubelet the process runs: "critlet" or
	// "stock", and "replaced" after it when that binary is no longer the
	// file at /usr/bin/kubelet (replaced or deleted by a package).
	Runs string
}

func (s unitState) String() string {
	if !s.Exists && !s.Enabled && !s.Active {
		return "no unit"
	}
	e := "disabled"
	if s.Enabled {
		e = "enabled"
	}
	if !s.Active {
		return e + ", inactive"
	}
	return e + ", active: " + s.Runs
}

func (f *fakeSystemd) unit(t *testing.T) unitState {
	t.Helper()
	var s unitState
	for _, d := range []string{"etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"} {
		s.Exists = s.Exists || exists(filepath.Join(f.root, d, kubeletUnit))
	}
	s.Enabled = exists(filepath.Join(f.state, "enabled", kubeletUnit))
	s.Active = exists(filepath.Join(f.state, "active", kubeletUnit))
	if !s.Active {
		return s
	}
	exe := filepath.Join(f.state, "exe", kubeletUnit)
	s.Runs = whichKubelet(t, exe)
	running, err1 := os.Stat(exe)
	installed, err2 := os.Stat(filepath.Join(f.root, "usr/bin/kubelet"))
	if err1 != nil || err2 != nil || !os.SameFile(running, installed) {
		s.Runs += " (replaced)"
	}
	return s
}

var (
	kubeletSums     map[string]string // sha256 -> "critlet" or "stock"
	kubeletSumsOnce sync.Once
)

// whichKubelet names the kubelet in file: critlet's or the stock one.
func whichKubelet(t *testing.T, file string) string {
	t.Helper()
	kubeletSumsOnce.Do(func() {
		kubeletSums = map[string]string{sum(t, patchedBin): "critlet", sum(t, stockBin): "stock"}
	})
	if name, ok := kubeletSums[sum(t, file)]; ok {
		return name
	}
	return "an unknown binary"
}

func sum(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return string(h.Sum(nil))
}

// said is what the packages' scripts told the operator: their
// kubelet-critlet lines.
func said(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "kubelet-critlet: ") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// swapTable runs package operations in a root with the fake systemd and
// records, for each, kubelet.service before and after, the systemctl calls
// the scripts made and what they said.
type swapTable struct {
	format string
	sd     *fakeSystemd
	// scratch is where the scripts keep state between them, which none
	// leaves behind after a package operation ("": they keep none).
	scratch string
	rows    []swapRow
}

type swapRow struct {
	step          string
	before, after unitState
	calls         []string
	said          string
}

// step runs op (which returns the package manager's output) and checks
// the state after it; when wantSaid is not empty the scripts must have
// said it.
func (tb *swapTable) step(t *testing.T, name string, want unitState, wantSaid string, op func() (string, error)) swapRow {
	t.Helper()
	row := swapRow{step: name, before: tb.sd.unit(t)}
	n, complained := len(tb.sd.calls(t)), len(tb.sd.complaints(t))
	out, err := op()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	row.after = tb.sd.unit(t)
	row.calls = tb.sd.calls(t)[n:]
	row.said = said(out)
	tb.rows = append(tb.rows, row)
	if row.after != want {
		t.Errorf("%s %s: kubelet.service went from %v to %v, want %v\nsystemctl calls: %q\nsaid: %s", tb.format, name, row.before, row.after, want, row.calls, row.said)
	}
	if wantSaid != "" && !strings.Contains(row.said, wantSaid) {
		t.Errorf("%s %s: the scripts said %q, want them to say %q", tb.format, name, row.said, wantSaid)
	}
	if tb.scratch != "" && exists(filepath.Join(tb.sd.root, tb.scratch)) {
		t.Errorf("%s %s: the scripts left %s behind", tb.format, name, tb.scratch)
	}
	if c := tb.sd.complaints(t)[complained:]; c != "" {
		t.Errorf("%s %s: systemd would not have done as the scripts asked:\n%s", tb.format, name, c)
	}
	return row
}

// markdown is the table as docs/install.md's swap table has it.
func (tb *swapTable) markdown() string {
	var b bytes.Buffer
	b.WriteString("| " + tb.format + " | before | after | systemctl calls | scripts said |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range tb.rows {
		calls := make([]string, len(r.calls))
		for i, c := range r.calls {
			calls[i] = "`" + c + "`"
		}
		b.WriteString("| " + r.step + " | " + r.before.String() + " | " + r.after.String() + " | " +
			strings.Join(calls, "<br>") + " | " + strings.ReplaceAll(r.said, "\n", "<br>") + " |\n")
	}
	return b.String()
}

// starts is the calls that start a unit or restart it.
func starts(calls []string) []string {
	var got []string
	for _, c := range calls {
		verb, now := "", false
		for _, w := range strings.Fields(c) {
			switch {
			case w == "--now":
				now = true
			case strings.HasPrefix(w, "-"):
			case verb == "":
				verb = w
			}
		}
		switch verb {
		case "start", "restart", "try-restart", "reload-or-restart", "try-reload-or-restart":
			got = append(got, c)
		case "enable":
			if now {
				got = append(got, c)
			}
		}
	}
	return got
}

var (
	enabledInactive  = unitState{Exists: true, Enabled: true}
	disabledInactive = unitState{Exists: true}
)

func enabledRunning(runs string) unitState {
	return unitState{Exists: true, Enabled: true, Active: true, Runs: runs}
}

func disabledRunning(runs string) unitState {
	return unitState{Exists: true, Active: true, Runs: runs}
}
