package isolation

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	mountutils "k8s.io/mount-utils"
)

// mounts reads a mountinfo file (the kubelet's own parser), mount points
// unescaped.
func mounts(mountinfo string) ([]mountutils.MountInfo, error) {
	infos, err := mountutils.ParseMountInfo(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading mounts from %s: %w", mountinfo, err)
	}
	for i := range infos {
		infos[i].MountPoint = unescapeMount(infos[i].MountPoint)
	}
	return infos, nil
}

// MountsUnder lists the mount points below dir in a mountinfo file, deepest
// first, the order they can be unmounted in.
func MountsUnder(mountinfo, dir string) ([]string, error) {
	infos, err := mounts(mountinfo)
	if err != nil {
		return nil, err
	}
	var under []string
	for _, m := range infos {
		if strings.HasPrefix(m.MountPoint, dir+"/") {
			under = append(under, m.MountPoint)
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	return under, nil
}

// MountsAt lists the mount points at dir or below it in a mountinfo file.
// dir must be resolved: mountinfo names mount points by their real paths.
func MountsAt(mountinfo, dir string) ([]string, error) {
	infos, err := mounts(mountinfo)
	if err != nil {
		return nil, err
	}
	var at []string
	for _, m := range infos {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			at = append(at, m.MountPoint)
		}
	}
	return at, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
