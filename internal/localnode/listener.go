package localnode

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/critlet/critlet/internal/hoststate"
)

// The health checks ask a port, not a process: another program listening
// on a node's port in the moment between the free-port check and the
// component's start would pass them. checkListener closes that gap: the
// socket listening on the port must be held by the started process or one
// of its descendants (the supervisor starts the component; nsenter starts
// the kubelet).

// checkListener reports whether the TCP socket listening on port on
// loopback belongs to root's process tree.
func checkListener(name string, port, root int) error {
	pids, err := listenerPIDs(port)
	if err != nil {
		return fmt.Errorf("%s: finding the process listening on port %d: %w", name, port, err)
	}
	for _, pid := range pids {
		if descendsFrom(pid, root) {
			return nil
		}
	}
	return fmt.Errorf("%s: port %d answers, but from processes %v, not the %s started as process %d: another program holds the port", name, port, pids, name, root)
}

// listenerPIDs returns the processes holding a socket that listens on port
// on 127.0.0.1 or all addresses (IPv4 or IPv6).
func listenerPIDs(port int) ([]int, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue // no IPv6
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // LISTEN
				continue
			}
			addr, portHex, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(portHex, 16, 16); !ok || err != nil || int(p) != port {
				continue
			}
			if strings.Trim(addr, "0") == "" || addr == "0100007F" || addr == "0000000000000000FFFF00000100007F" || addr == "00000000000000000000000001000000" {
				inodes[fields[9]] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return nil, fmt.Errorf("nothing listens on port %d", port)
	}
	all, err := hoststate.PIDs()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, pid := range all {
		dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// descendsFrom reports whether pid is root or a descendant of it.
func descendsFrom(pid, root int) bool {
	for depth := 0; pid > 1 && depth < 64; depth++ {
		if pid == root {
			return true
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		fields := strings.Fields(string(b[i+1:]))
		if i < 0 || len(fields) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(fields[1]); err != nil {
			return false
		}
	}
	return pid == root
}
