package main

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"

	imageutils "k8s.io/kubernetes/test/utils/image"

	"github.com/critlet/critlet/internal/localnode/oci"
)

// Images the suite names, built here from what the machine has: the
// project's pause process, agnhost compiled from the pinned module, and
// Debian's static busybox. Any other image the suite names cannot be made
// offline; the tests that need it fail or skip, and the report says so.
var (
	pauseImage   = imageutils.GetPauseImageName()
	agnhostImage = imageutils.GetE2EImage(imageutils.Agnhost)
	busyboxImage = imageutils.GetE2EImage(imageutils.BusyBox)
)

// imageSources are the files the images are made of; without Agnhost
// there is no agnhost image.
type imageSources struct {
	Pause, Agnhost, Busybox string
}

// suiteImages builds the images. Both agnhost's and busybox's upstream
// images rest on a busybox userland (agnhost's on Alpine's), so each gets
// every applet of Debian's busybox, and agnhost the user and group its
// Dockerfile adds.
func suiteImages(src imageSources) ([]oci.Image, error) {
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("image contents: %w", err)
		}
		return b, nil
	}
	pause, err := read(src.Pause)
	if err != nil {
		return nil, err
	}
	userland, err := busyboxUserland(src.Busybox)
	if err != nil {
		return nil, err
	}
	const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	bbFiles := append(userland,
		oci.File{Path: "/etc/passwd", Content: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		oci.File{Path: "/etc/group", Content: []byte("root:x:0:\nnogroup:x:65534:\n")},
	)
	imgs := []oci.Image{
		{Name: pauseImage, Entrypoint: []string{"/pause"}, Files: []oci.File{{Path: "/pause", Mode: 0o755, Content: pause}}},
		{Name: busyboxImage, Cmd: []string{"sh"}, Env: []string{pathEnv}, Files: bbFiles},
	}
	if src.Agnhost == "" {
		return imgs, nil
	}
	agnhost, err := read(src.Agnhost)
	if err != nil {
		return nil, err
	}
	agFiles := append(append([]oci.File(nil), userland...),
		oci.File{Path: "/agnhost", Mode: 0o755, Content: agnhost},
		oci.File{Path: "/agnhost-2", Link: "agnhost"},
		oci.File{Path: "/uploads", Mode: 0o755 | os.ModeDir},
		oci.File{Path: "/etc/passwd", Content: []byte("root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		oci.File{Path: "/etc/group", Content: []byte("root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n")},
	)
	return append(imgs, oci.Image{Name: agnhostImage, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{pathEnv}, Files: agFiles}), nil
}

// busyboxUserland is a static busybox and a link for each applet it lists.
func busyboxUserland(busybox string) ([]oci.File, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (hack/install-node-deps.sh installs busybox-static)", err)
	}
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("listing busybox's applets: %w", err)
	}
	files := []oci.File{{Path: "/bin/busybox", Mode: 0o755, Content: bin}, {Path: "/tmp", Mode: 0o777 | os.ModeDir | os.ModeSticky}}
	for _, applet := range strings.Fields(string(out)) {
		p := "/" + strings.TrimPrefix(applet, "/")
		if p == "/bin/busybox" {
			continue
		}
		files = append(files, oci.File{Path: p, Link: appletLink(p)})
	}
	return files, nil
}

// appletLink is the relative link from an applet's path to /bin/busybox:
// relative, so that it resolves inside the container's root.
func appletLink(p string) string {
	dir := path.Dir(p)
	if dir == "/" {
		return "bin/busybox"
	}
	return strings.Repeat("../", strings.Count(dir, "/")) + "bin/busybox"
}
