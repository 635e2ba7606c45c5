package oci

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// archive is a written image read back, with every reference checked.
type archive struct {
	names    []string // outer entries in archive order
	files    map[string][]byte
	index    ocispec.Index
	manifest ocispec.Manifest
	config   ocispec.Image
	layer    []*tar.Header // layer entries in order
	contents map[string]string
}

func readArchive(t *testing.T, data []byte) archive {
	t.Helper()
	a := archive{files: map[string][]byte{}, contents: map[string]string{}}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading archive: %v", err)
		}
		checkFixedMetadata(t, hdr)
		a.names = append(a.names, hdr.Name)
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", hdr.Name, err)
		}
		a.files[hdr.Name] = b
	}
	if got, want := string(a.files["oci-layout"]), `{"imageLayoutVersion":"1.0.0"}`; got != want {
		t.Errorf("oci-layout = %s, want %s", got, want)
	}
	// Every blob must be named by the SHA-256 of its content.
	for name, b := range a.files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			sum := sha256.Sum256(b)
			if got := hex.EncodeToString(sum[:]); got != hexDigest {
				t.Errorf("blob %s has digest %s", name, got)
			}
		}
	}
	unmarshal(t, a.files["index.json"], &a.index)
	if a.index.SchemaVersion != 2 || a.index.MediaType != ocispec.MediaTypeImageIndex || len(a.index.Manifests) != 1 {
		t.Fatalf("index = %+v, want schema 2, %s, one manifest", a.index, ocispec.MediaTypeImageIndex)
	}
	unmarshal(t, blob(t, a, a.index.Manifests[0], ocispec.MediaTypeImageManifest), &a.manifest)
	if a.manifest.SchemaVersion != 2 || a.manifest.MediaType != ocispec.MediaTypeImageManifest || len(a.manifest.Layers) != 1 {
		t.Fatalf("manifest = %+v, want schema 2, %s, one layer", a.manifest, ocispec.MediaTypeImageManifest)
	}
	unmarshal(t, blob(t, a, a.manifest.Config, ocispec.MediaTypeImageConfig), &a.config)
	layer := blob(t, a, a.manifest.Layers[0], ocispec.MediaTypeImageLayer)
	if want := []digest.Digest{a.manifest.Layers[0].Digest}; !reflect.DeepEqual(a.config.RootFS.DiffIDs, want) || a.config.RootFS.Type != "layers" {
		t.Errorf("rootfs = %+v, want layers with diff_ids %v", a.config.RootFS, want)
	}
	if got := len(a.files); got != 5 {
		t.Errorf("archive has %d regular files, want oci-layout, index.json and 3 blobs", got)
	}

	lr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading layer: %v", err)
		}
		checkFixedMetadata(t, hdr)
		a.layer = append(a.layer, hdr)
		b, err := io.ReadAll(lr)
		if err != nil {
			t.Fatalf("reading layer entry %s: %v", hdr.Name, err)
		}
		a.contents[hdr.Name] = string(b)
	}
	return a
}

// blob returns the content d points at after checking its media type and size.
func blob(t *testing.T, a archive, d ocispec.Descriptor, mediaType string) []byte {
	t.Helper()
	if d.MediaType != mediaType {
		t.Errorf("descriptor %s has media type %s, want %s", d.Digest, d.MediaType, mediaType)
	}
	b, ok := a.files["blobs/sha256/"+d.Digest.Encoded()]
	if !ok || d.Digest.Algorithm() != digest.SHA256 {
		t.Fatalf("no blob for descriptor %+v", d)
	}
	if int64(len(b)) != d.Size {
		t.Errorf("descriptor %s has size %d, blob has %d bytes", d.Digest, d.Size, len(b))
	}
	return b
}

func unmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

func checkFixedMetadata(t *testing.T, hdr *tar.Header) {
	t.Helper()
	if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" || hdr.ModTime.Unix() != 0 {
		t.Errorf("entry %s: uid %d gid %d uname %q gname %q mtime %v, want root-owned at the epoch",
			hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname, hdr.ModTime)
	}
}

// layerEntry is a layer member in a comparable form.
type layerEntry struct {
	Name     string
	Type     byte
	Mode     int64
	Linkname string
	Content  string
}

func layerEntries(a archive) []layerEntry {
	var out []layerEntry
	for _, h := range a.layer {
		out = append(out, layerEntry{h.Name, h.Typeflag, h.Mode, h.Linkname, a.contents[h.Name]})
	}
	return out
}

func pauseImage() Image {
	return Image{
		Name:       "critlet.local/pause:1",
		Entrypoint: []string{"/pause"},
		Env:        []string{"PATH=/usr/bin:/bin"},
		Files:      []File{{Path: "/pause", Mode: 0o755, Content: []byte("binary")}},
	}
}

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		img        Image
		wantName   string
		wantTag    string
		wantConfig ocispec.ImageConfig
		wantLayer  []layerEntry
	}{
		{
			name:       "single file",
			img:        pauseImage(),
			wantName:   "critlet.local/pause:1",
			wantTag:    "1",
			wantConfig: ocispec.ImageConfig{Entrypoint: []string{"/pause"}, Env: []string{"PATH=/usr/bin:/bin"}},
			wantLayer:  []layerEntry{{"pause", tar.TypeReg, 0o755, "", "binary"}},
		},
		{
			name: "parents, symlinks, explicit directories and special bits",
			img: Image{
				Name:       "localhost:5000/tools/box",
				Entrypoint: []string{"/bin/sh"},
				Cmd:        []string{"-c", "true"},
				Files: []File{
					{Path: "usr/bin/tool", Content: []byte("t")},
					{Path: "/bin/sh", Link: "../usr/bin/tool"},
					{Path: "./etc//hosts", Mode: 0o600, Content: []byte("127.0.0.1 localhost\n")},
					{Path: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
					{Path: "usr/lib/x", Mode: fs.ModeSymlink, Link: "/dev/null"},
					{Path: "opt/", Mode: fs.ModeDir},
					{Path: "sbin/su", Mode: fs.ModeSetuid | 0o755, Content: []byte("su")},
				},
			},
			wantName:   "localhost:5000/tools/box:latest",
			wantTag:    "latest",
			wantConfig: ocispec.ImageConfig{Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "true"}},
			wantLayer: []layerEntry{
				{"bin/", tar.TypeDir, 0o755, "", ""},
				{"bin/sh", tar.TypeSymlink, 0o777, "../usr/bin/tool", ""},
				{"etc/", tar.TypeDir, 0o755, "", ""},
				{"etc/hosts", tar.TypeReg, 0o600, "", "127.0.0.1 localhost\n"},
				{"opt/", tar.TypeDir, 0o755, "", ""},
				{"sbin/", tar.TypeDir, 0o755, "", ""},
				{"sbin/su", tar.TypeReg, 0o4755, "", "su"},
				{"tmp/", tar.TypeDir, 0o1777, "", ""},
				{"usr/", tar.TypeDir, 0o755, "", ""},
				{"usr/bin/", tar.TypeDir, 0o755, "", ""},
				{"usr/bin/tool", tar.TypeReg, 0o644, "", "t"},
				{"usr/lib/", tar.TypeDir, 0o755, "", ""},
				{"usr/lib/x", tar.TypeSymlink, 0o777, "/dev/null", ""},
			},
		},
		{
			name: "explicit parent directory keeps its mode",
			img: Image{
				Name: "critlet.local/a/b:v1.2_x",
				Cmd:  []string{"/secret/run"},
				Files: []File{
					{Path: "/secret/run", Mode: 0o700, Content: []byte("r")},
					{Path: "/secret", Mode: fs.ModeDir | 0o700},
				},
			},
			wantName:   "critlet.local/a/b:v1.2_x",
			wantTag:    "v1.2_x",
			wantConfig: ocispec.ImageConfig{Cmd: []string{"/secret/run"}},
			wantLayer: []layerEntry{
				{"secret/", tar.TypeDir, 0o700, "", ""},
				{"secret/run", tar.TypeReg, 0o700, "", "r"},
			},
		},
		{
			name:       "short name is expanded the way the CRI resolves it",
			img:        Image{Name: "pause:3.10", Cmd: []string{"/pause"}},
			wantName:   "docker.io/library/pause:3.10",
			wantTag:    "3.10",
			wantConfig: ocispec.ImageConfig{Cmd: []string{"/pause"}},
		},
		{
			name:       "name without registry host",
			img:        Image{Name: "critlet/pause", Cmd: []string{"/pause"}},
			wantName:   "docker.io/critlet/pause:latest",
			wantTag:    "latest",
			wantConfig: ocispec.ImageConfig{Cmd: []string{"/pause"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, tc.img); err != nil {
				t.Fatalf("Write: %v", err)
			}
			a := readArchive(t, buf.Bytes())

			wantAnn := map[string]string{AnnotationImageName: tc.wantName, ocispec.AnnotationRefName: tc.wantTag}
			if got := a.index.Manifests[0].Annotations; !reflect.DeepEqual(got, wantAnn) {
				t.Errorf("manifest annotations = %v, want %v", got, wantAnn)
			}
			if p := a.index.Manifests[0].Platform; p == nil || !reflect.DeepEqual(*p, ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"}) {
				t.Errorf("manifest platform = %+v, want linux/%s", p, runtime.GOARCH)
			}
			if a.config.Architecture != runtime.GOARCH || a.config.OS != "linux" {
				t.Errorf("config platform = %s/%s, want linux/%s", a.config.OS, a.config.Architecture, runtime.GOARCH)
			}
			if !reflect.DeepEqual(a.config.Config, tc.wantConfig) {
				t.Errorf("config = %+v, want %+v", a.config.Config, tc.wantConfig)
			}
			if got := layerEntries(a); !reflect.DeepEqual(got, tc.wantLayer) {
				t.Errorf("layer entries:\n got %+v\nwant %+v", got, tc.wantLayer)
			}

			wantNames := []string{"oci-layout", "index.json", "blobs/", "blobs/sha256/"}
			if len(a.names) != 7 || !reflect.DeepEqual(a.names[:4], wantNames) {
				t.Errorf("archive entries = %v, want %v and 3 blobs", a.names, wantNames)
			}
		})
	}
}

func TestWriteIsDeterministic(t *testing.T) {
	img := pauseImage()
	img.Files = append(img.Files,
		File{Path: "/z/a", Content: []byte("a")},
		File{Path: "/a/z", Content: []byte("z")},
		File{Path: "/m", Link: "/z/a"},
	)
	var first, second bytes.Buffer
	if err := Write(&first, img); err != nil {
		t.Fatalf("Write: %v", err)
	}
	// Reversed input order must not matter either.
	for i, j := 0, len(img.Files)-1; i < j; i, j = i+1, j-1 {
		img.Files[i], img.Files[j] = img.Files[j], img.Files[i]
	}
	if err := Write(&second, img); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Error("two writes of the same image differ")
	}
}

func TestWriteRejects(t *testing.T) {
	cmd := []string{"/pause"}
	for _, tc := range []struct {
		name    string
		img     Image
		wantErr string
	}{
		{"empty name", Image{Cmd: cmd}, "image name is empty"},
		{"digest reference", Image{Name: "critlet.local/pause@sha256:abc", Cmd: cmd}, "digest references are not supported"},
		{"uppercase repository", Image{Name: "critlet.local/Pause:1", Cmd: cmd}, `invalid path component "Pause"`},
		{"empty tag", Image{Name: "critlet.local/pause:", Cmd: cmd}, `invalid tag ""`},
		{"bad tag", Image{Name: "critlet.local/pause:-x", Cmd: cmd}, `invalid tag "-x"`},
		{"bad host", Image{Name: "bad_host.local/pause:1", Cmd: cmd}, `invalid registry host "bad_host.local"`},
		{"empty component", Image{Name: "critlet.local//pause:1", Cmd: cmd}, `invalid path component ""`},
		{"nothing to run", Image{Name: "critlet.local/pause:1"}, "neither Entrypoint nor Cmd"},
		{"bad env", Image{Name: "p", Cmd: cmd, Env: []string{"NOVALUE"}}, `"NOVALUE" is not KEY=VALUE`},
		{"empty env key", Image{Name: "p", Cmd: cmd, Env: []string{"=x"}}, `"=x" is not KEY=VALUE`},
		{"empty path", Image{Name: "p", Cmd: cmd, Files: []File{{}}}, "empty file path"},
		{"root", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "/", Mode: fs.ModeDir}}}, "names the root directory"},
		{"dot", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "."}}}, "names the root directory"},
		{"escape", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "../etc/passwd"}}}, `contains ".."`},
		{"escape from root", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "/../x"}}}, `contains ".."`},
		{"inner dotdot", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a/../b"}}}, `contains ".."`},
		{"whiteout", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "etc/.wh.hosts"}}}, "whiteout"},
		{"duplicate", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "/a"}, {Path: "a"}}}, `duplicate path "a"`},
		{"duplicate after cleaning", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "x/y/"}, {Path: "./x//y"}}}, `duplicate path "x/y"`},
		{"file as parent", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a"}, {Path: "a/b"}}}, `parent "a" is not a directory`},
		{"symlink as parent", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a", Link: "b"}, {Path: "a/b"}}}, `parent "a" is not a directory`},
		{"symlink without target", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a", Mode: fs.ModeSymlink}}}, "symlink without a target"},
		{"symlink with content", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a", Link: "b", Content: []byte("x")}}}, "symlink has content"},
		{"directory with target", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a", Mode: fs.ModeDir, Link: "b"}}}, "symlink target set"},
		{"directory with content", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "a", Mode: fs.ModeDir, Content: []byte("x")}}}, "directory has content"},
		{"device", Image{Name: "p", Cmd: cmd, Files: []File{{Path: "dev/null", Mode: fs.ModeDevice | fs.ModeCharDevice}}}, "unsupported file type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tc.img)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Write error = %v, want one containing %q", err, tc.wantErr)
			}
			if buf.Len() != 0 {
				t.Errorf("Write wrote %d bytes for an invalid image", buf.Len())
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pause.tar")
	if err := WriteFile(path, pauseImage()); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	var want bytes.Buffer
	if err := Write(&want, pauseImage()); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Error("WriteFile's archive differs from Write's")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("archive mode = %v (%v), want 0644", fi.Mode(), err)
	}

	// A failed write leaves neither a file under the name nor a temporary.
	bad := filepath.Join(dir, "bad.tar")
	if err := WriteFile(bad, Image{Cmd: []string{"/x"}}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("WriteFile error = %v, want one naming %s", err, bad)
	}
	if _, err := os.Stat(bad); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed write left %s: %v", bad, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only pause.tar", names)
	}

	if err := WriteFile(filepath.Join(dir, "missing", "x.tar"), pauseImage()); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
}
