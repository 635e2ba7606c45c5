// Package oci writes single-layer container images as OCI image layout
// archives, the tar stream that "ctr -n k8s.io images import" loads into
// containerd. The local test node has no registry, so its images are built
// from files in memory and imported this way.
//
// Output is deterministic: the same Image always yields the same bytes, so
// digests are stable across runs and an unchanged image is not re-imported
// under a new identity.
package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/critlet/critlet/internal/atomicfile"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// AnnotationImageName is the full reference containerd registers an image
// under on import (the OCI layout's own ref.name holds the tag alone).
const AnnotationImageName = "io.containerd.image.name"

// File is one entry of the image's filesystem.
//
// The kind comes from Mode's type bits: a directory when Mode.IsDir(), a
// symbolic link when Link is set (Mode may then be 0 or fs.ModeSymlink), a
// regular file otherwise. Zero permission bits mean 0644 for regular files
// and 0755 for directories. Parent directories that are not listed are
// created with mode 0755.
type File struct {
	Path    string
	Mode    fs.FileMode
	Content []byte
	Link    string // symlink target when non-empty
}

// Image is a container image with a single layer holding Files.
//
// Name is a reference such as "critlet.local/pause:1". It is stored in the
// normalised form that the CRI looks images up by: a name without a tag gets
// ":latest", and a name without a registry host gets "docker.io/" (plus
// "library/" for a single path component), as "pause:1" becomes
// "docker.io/library/pause:1".
type Image struct {
	Name       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	Files      []File
}

// epoch is every entry's modification time. Real times would make each
// build produce a different layer digest.
var epoch = time.Unix(0, 0).UTC()

// Write writes img to w as an OCI image layout tar archive. Nothing is
// written when img is invalid.
func Write(w io.Writer, img Image) error {
	name, tag, err := normaliseName(img.Name)
	if err != nil {
		return err
	}
	if len(img.Entrypoint) == 0 && len(img.Cmd) == 0 {
		// containerd would accept the image and fail only when a container
		// is created from it, far from the cause.
		return fmt.Errorf("image %s: neither Entrypoint nor Cmd is set", name)
	}
	for _, e := range img.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("image %s: environment entry %q is not KEY=VALUE", name, e)
		}
	}
	layer, err := buildLayer(img.Files)
	if err != nil {
		return fmt.Errorf("image %s: %w", name, err)
	}
	layerDesc := describe(ocispec.MediaTypeImageLayer, layer)
	plat := ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"}

	cfg, err := json.Marshal(ocispec.Image{
		Platform: plat,
		Config: ocispec.ImageConfig{
			Entrypoint: img.Entrypoint,
			Cmd:        img.Cmd,
			Env:        img.Env,
		},
		// The layer is not compressed: its digest is its diff ID.
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	if err != nil {
		return fmt.Errorf("image %s: encoding config: %w", name, err)
	}
	cfgDesc := describe(ocispec.MediaTypeImageConfig, cfg)

	mf, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return fmt.Errorf("image %s: encoding manifest: %w", name, err)
	}
	mfDesc := describe(ocispec.MediaTypeImageManifest, mf)
	mfDesc.Annotations = map[string]string{
		AnnotationImageName:       name,
		ocispec.AnnotationRefName: tag,
	}
	mfDesc.Platform = &plat

	idx, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{mfDesc},
	})
	if err != nil {
		return fmt.Errorf("image %s: encoding index: %w", name, err)
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return fmt.Errorf("image %s: encoding layout: %w", name, err)
	}

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layout},
		{ocispec.ImageIndexFile, idx},
		{ocispec.ImageBlobsDir + "/", nil},
		{ocispec.ImageBlobsDir + "/sha256/", nil},
	}
	blobs := []struct {
		name string
		data []byte
	}{
		{blobPath(layerDesc), layer},
		{blobPath(cfgDesc), cfg},
		{blobPath(mfDesc), mf},
	}
	// Sorted so the archive does not depend on which blob is built first.
	sort.Slice(blobs, func(i, j int) bool { return blobs[i].name < blobs[j].name })
	for _, e := range append(entries, blobs...) {
		hdr := &tar.Header{Name: e.name, ModTime: epoch}
		if strings.HasSuffix(e.name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		} else {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("image %s: writing %s: %w", name, e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("image %s: writing %s: %w", name, e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image %s: finishing archive: %w", name, err)
	}
	return nil
}

// WriteFile writes img to the archive at path. The archive is written to a
// temporary file in the same directory and renamed into place, so a reader
// such as ctr never sees a partial archive.
func WriteFile(path string, img Image) error {
	if err := atomicfile.Write(path, 0o644, func(w io.Writer) error { return Write(w, img) }); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return nil
}

func describe(mediaType string, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

func blobPath(d ocispec.Descriptor) string {
	return path.Join(ocispec.ImageBlobsDir, d.Digest.Algorithm().String(), d.Digest.Encoded())
}

// entry is a layer member after validation, keyed by its cleaned path.
type entry struct {
	kind byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode int64
	data []byte
	link string
}

// buildLayer returns the uncompressed layer tar holding files and every
// parent directory they need. The layer is not compressed, so its digest is
// also its diff ID.
func buildLayer(files []File) ([]byte, error) {
	entries := make(map[string]entry, len(files))
	for _, f := range files {
		p, err := cleanPath(f.Path)
		if err != nil {
			return nil, err
		}
		if _, dup := entries[p]; dup {
			return nil, fmt.Errorf("file %q: duplicate path %q", f.Path, p)
		}
		e, err := toEntry(f)
		if err != nil {
			return nil, fmt.Errorf("file %q: %w", f.Path, err)
		}
		entries[p] = e
	}
	for p := range entries {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			e, ok := entries[dir]
			if !ok {
				entries[dir] = entry{kind: tar.TypeDir, mode: 0o755}
				continue
			}
			if e.kind != tar.TypeDir {
				return nil, fmt.Errorf("file %q: parent %q is not a directory", p, dir)
			}
		}
	}

	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	// A parent's path is a prefix of its children's, so sorting also puts
	// every directory before its contents.
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := entries[p]
		hdr := &tar.Header{
			Typeflag: e.kind,
			Name:     p,
			Linkname: e.link,
			Mode:     e.mode,
			Size:     int64(len(e.data)),
			ModTime:  epoch,
		}
		if e.kind == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("finishing layer: %w", err)
	}
	return buf.Bytes(), nil
}

func toEntry(f File) (entry, error) {
	perm := int64(f.Mode.Perm())
	// Special bits are encoded the way tar and the Unix kernel spell them.
	if f.Mode&fs.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if f.Mode&fs.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if f.Mode&fs.ModeSticky != 0 {
		perm |= 0o1000
	}
	switch typ := f.Mode.Type(); {
	case f.Link != "":
		if typ != 0 && typ != fs.ModeSymlink {
			return entry{}, fmt.Errorf("symlink target set on a file of type %v", typ)
		}
		if len(f.Content) != 0 {
			return entry{}, errors.New("symlink has content")
		}
		return entry{kind: tar.TypeSymlink, mode: 0o777, link: f.Link}, nil
	case typ == fs.ModeSymlink:
		return entry{}, errors.New("symlink without a target")
	case typ == fs.ModeDir:
		if len(f.Content) != 0 {
			return entry{}, errors.New("directory has content")
		}
		if f.Mode.Perm() == 0 {
			perm |= 0o755
		}
		return entry{kind: tar.TypeDir, mode: perm}, nil
	case typ == 0:
		if f.Mode.Perm() == 0 {
			perm |= 0o644
		}
		return entry{kind: tar.TypeReg, mode: perm, data: f.Content}, nil
	default:
		return entry{}, fmt.Errorf("unsupported file type %v", typ)
	}
}

// cleanPath turns an absolute or relative path into the relative, slash
// separated form layer entries use.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty file path")
	}
	// Rejected outright rather than cleaned away: "a/../b" is more likely a
	// mistake than a spelling of "b", and "/../b" would silently land in "/".
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", fmt.Errorf("file path %q contains \"..\"", p)
		}
	}
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if c == "" {
		return "", fmt.Errorf("file path %q names the root directory", p)
	}
	// containerd's layer applier treats ".wh." names as deletions of files
	// from lower layers, never as files.
	if strings.HasPrefix(path.Base(c), ".wh.") {
		return "", fmt.Errorf("file path %q uses the reserved whiteout prefix \".wh.\"", p)
	}
	return c, nil
}

var (
	tagRE       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	domainRE    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?$`)
	componentRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)
)

// normaliseName returns the full reference for name, in the form containerd
// and the CRI use, and its tag.
func normaliseName(name string) (full, tag string, err error) {
	if name == "" {
		return "", "", errors.New("image name is empty")
	}
	if strings.Contains(name, "@") {
		return "", "", fmt.Errorf("image name %q: digest references are not supported, use a tag", name)
	}
	repo, tag := name, "latest"
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		repo, tag = name[:i], name[i+1:]
		if !tagRE.MatchString(tag) {
			return "", "", fmt.Errorf("image name %q: invalid tag %q", name, tag)
		}
	}
	domain, rest, found := strings.Cut(repo, "/")
	// Same rule as Docker's: the first component is a registry host only if
	// it looks like one.
	if !found || (!strings.ContainsAny(domain, ".:") && domain != "localhost") {
		domain, rest = "docker.io", repo
		if !found {
			rest = "library/" + repo
		}
	}
	if !domainRE.MatchString(domain) {
		return "", "", fmt.Errorf("image name %q: invalid registry host %q", name, domain)
	}
	for _, c := range strings.Split(rest, "/") {
		if !componentRE.MatchString(c) {
			return "", "", fmt.Errorf("image name %q: invalid path component %q (lowercase letters, digits and separators only)", name, c)
		}
	}
	return domain + "/" + rest + ":" + tag, tag, nil
}
