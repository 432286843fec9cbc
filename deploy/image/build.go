package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "crypto/sha256" // registers SHA-256 for go-digest
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Binaries are the static executables of the image, read from Spec.BinDir
// and installed in ImageBinDir.
var Binaries = []string{"gpuext-nri-plugin", "gpuext-oci-hook", "gpuext-runc", "gpuextctl"}

const (
	// DevrtLibrary is the device runtime, relative to Spec.BinDir.
	DevrtLibrary = "devrt/libgpuext-devrt.so"
	// ImageBinDir holds the binaries in the image.
	ImageBinDir = "usr/local/bin"
	// ImageDevrtPath is where the image holds the device runtime: the
	// source `gpuextctl setup-node` copies to the host's devrtDir.
	ImageDevrtPath = "usr/lib/gpuext/devrt/libgpuext-devrt.so"
	// Entrypoint is the image's entrypoint: the host agent.
	Entrypoint = "/" + ImageBinDir + "/gpuext-nri-plugin"

	// AnnotationImageName is the full name containerd gives an image
	// imported from an OCI layout (ctr images import).
	AnnotationImageName = "io.containerd.image.name"
)

// Spec says what to build.
type Spec struct {
	// BinDir is the output of `make build`: Binaries and DevrtLibrary.
	BinDir string
	// Name is the image reference, REPOSITORY:TAG.
	Name string
	// Version, Revision and Source become the org.opencontainers.image.*
	// labels and annotations (omitted when empty).
	Version, Revision, Source string
	// Created is the image's creation time (config and label).
	Created time.Time
	// Arch is the GOARCH of the image; empty: the binaries' architecture.
	Arch string
}

// Result names what Build wrote.
type Result struct {
	Name     string
	Arch     string
	Manifest digest.Digest // what `ctr images ls` shows as the image digest
	Config   digest.Digest
	Layer    digest.Digest // the compressed layer blob
	DiffID   digest.Digest // the uncompressed layer
}

// file is one entry of the image's filesystem (a directory when data is nil
// and dir is set).
type file struct {
	name string // relative, no leading slash
	mode int64
	dir  bool
	data []byte
}

var (
	refRepo = regexp.MustCompile(`^[a-z0-9]+([._-]+[a-z0-9]+|/[a-z0-9]+|:[0-9]+/[a-z0-9]+)*$`)
	refTag  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// splitName splits REPOSITORY:TAG, checking both parts.
func splitName(name string) (repo, tag string, err error) {
	i := strings.LastIndex(name, ":")
	if i < 0 || strings.Contains(name[i:], "/") {
		return "", "", fmt.Errorf("image name %q: want REPOSITORY:TAG", name)
	}
	repo, tag = name[:i], name[i+1:]
	if !refRepo.MatchString(repo) {
		return "", "", fmt.Errorf("image name %q: repository %q: want lower-case path components", name, repo)
	}
	if !refTag.MatchString(tag) {
		return "", "", fmt.Errorf("image name %q: tag %q: want [A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128 characters", name, tag)
	}
	return repo, tag, nil
}

// Build writes the image's OCI layout archive to w.
func Build(spec Spec, w io.Writer) (Result, error) {
	_, tag, err := splitName(spec.Name)
	if err != nil {
		return Result{}, err
	}
	files, arch, err := collect(spec)
	if err != nil {
		return Result{}, err
	}
	res := Result{Name: spec.Name, Arch: arch}

	var layerTar bytes.Buffer
	if err := writeTar(&layerTar, files); err != nil {
		return Result{}, fmt.Errorf("layer: %w", err)
	}
	res.DiffID = digest.FromBytes(layerTar.Bytes())
	layer, err := gzipBytes(layerTar.Bytes())
	if err != nil {
		return Result{}, fmt.Errorf("layer: %w", err)
	}
	res.Layer = digest.FromBytes(layer)

	created := spec.Created.UTC()
	labels := map[string]string{
		v1.AnnotationTitle:       "gpuext",
		v1.AnnotationDescription: "gpuext host agent: per-container GPU policies (NRI plugin, OCI hook, runc wrapper, device runtime)",
		v1.AnnotationCreated:     created.Format(time.RFC3339),
	}
	for k, v := range map[string]string{v1.AnnotationVersion: spec.Version, v1.AnnotationRevision: spec.Revision, v1.AnnotationSource: spec.Source} {
		if v != "" {
			labels[k] = v
		}
	}
	cfg := v1.Image{
		Created:  &created,
		Platform: v1.Platform{Architecture: arch, OS: "linux"},
		Config: v1.ImageConfig{
			Entrypoint: []string{Entrypoint},
			Env:        []string{"PATH=/" + ImageBinDir + ":/usr/bin:/bin"},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{res.DiffID}},
		History: []v1.History{{Created: &created, CreatedBy: "deploy/image (static gpuext binaries and the device runtime, no base image)"}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return Result{}, err
	}
	res.Config = digest.FromBytes(cfgJSON)

	manifest := v1.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   v1.MediaTypeImageManifest,
		Config:      v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: res.Config, Size: int64(len(cfgJSON))},
		Layers:      []v1.Descriptor{{MediaType: v1.MediaTypeImageLayerGzip, Digest: res.Layer, Size: int64(len(layer))}},
		Annotations: labels,
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return Result{}, err
	}
	res.Manifest = digest.FromBytes(manifestJSON)

	index := v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: v1.MediaTypeImageManifest, Digest: res.Manifest, Size: int64(len(manifestJSON)),
			Platform: &v1.Platform{Architecture: arch, OS: "linux"},
			// containerd names the import by the full name; ref.name is
			// the tag, as the image-layout spec has it.
			Annotations: map[string]string{AnnotationImageName: spec.Name, v1.AnnotationRefName: tag},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return Result{}, err
	}
	layoutJSON, err := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err != nil {
		return Result{}, err
	}

	archive := []file{
		{name: "blobs", dir: true, mode: 0o755},
		{name: "blobs/sha256", dir: true, mode: 0o755},
		{name: v1.ImageIndexFile, mode: 0o644, data: indexJSON},
		{name: v1.ImageLayoutFile, mode: 0o644, data: layoutJSON},
	}
	for _, b := range [][]byte{layer, cfgJSON, manifestJSON} {
		archive = append(archive, file{name: "blobs/sha256/" + digest.FromBytes(b).Encoded(), mode: 0o644, data: b})
	}
	if err := writeTar(w, archive); err != nil {
		return Result{}, fmt.Errorf("archive: %w", err)
	}
	return res, nil
}

// collect reads the image's files from spec.BinDir and checks each binary.
func collect(spec Spec) ([]file, string, error) {
	arch := spec.Arch
	archFrom := "--arch"
	var files []file
	add := func(name string, shared bool, rel string) error {
		p := filepath.Join(spec.BinDir, rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%w (run make build)", err)
		}
		a, err := checkELF(p, data, shared)
		if err != nil {
			return err
		}
		if arch == "" {
			arch, archFrom = a, p
		} else if a != arch {
			return fmt.Errorf("%s is %s, but the image is %s (from %s)", p, a, arch, archFrom)
		}
		files = append(files, file{name: name, mode: 0o755, data: data})
		return nil
	}
	for _, b := range Binaries {
		if err := add(path.Join(ImageBinDir, b), false, b); err != nil {
			return nil, "", err
		}
	}
	if err := add(ImageDevrtPath, true, DevrtLibrary); err != nil {
		return nil, "", err
	}
	files = append(files,
		file{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/:/sbin/nologin\n")},
		file{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\n")},
		file{name: "tmp", dir: true, mode: 0o1777},
	)
	return withParents(files), arch, nil
}

// withParents adds a directory entry (0755) for every parent of every
// entry that has none.
func withParents(files []file) []file {
	have := map[string]bool{}
	for _, f := range files {
		have[f.name] = true
	}
	for _, f := range files {
		for d := path.Dir(f.name); d != "." && !have[d]; d = path.Dir(d) {
			have[d] = true
			files = append(files, file{name: d, dir: true, mode: 0o755})
		}
	}
	return files
}

// goarchOf maps an ELF machine to GOARCH.
var goarchOf = map[elf.Machine]string{
	elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_RISCV: "riscv64",
	elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_386: "386", elf.EM_ARM: "arm",
}

// checkELF returns the GOARCH of an ELF file. An executable (shared false)
// must be static: the image has no loader and no libc. A shared library
// (the device runtime, loaded into tenant processes that bring their own
// libc) must be ET_DYN.
func checkELF(name string, data []byte, shared bool) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("%s: not an ELF file: %w", name, err)
	}
	defer f.Close()
	arch, ok := goarchOf[f.Machine]
	if !ok {
		return "", fmt.Errorf("%s: unsupported ELF machine %s", name, f.Machine)
	}
	if shared {
		if f.Type != elf.ET_DYN {
			return "", fmt.Errorf("%s: ELF type %s, want a shared library (ET_DYN)", name, f.Type)
		}
		return arch, nil
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(io.LimitReader(p.Open(), 256))
			return "", fmt.Errorf("%s is dynamically linked (interpreter %s): the image has no loader or libc; build it with CGO_ENABLED=0 (make build)",
				name, strings.TrimRight(string(interp), "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return "", fmt.Errorf("%s: dynamic section: %w", name, err)
	}
	if len(libs) > 0 {
		return "", fmt.Errorf("%s needs shared libraries %v: the image has none; build it with CGO_ENABLED=0 (make build)", name, libs)
	}
	return arch, nil
}

// epoch is the mtime of every tar entry.
var epoch = time.Unix(0, 0)

// writeTar writes files as a reproducible tar: sorted by name, mtime 0,
// uid and gid 0 without names, the modes given, USTAR headers only.
func writeTar(w io.Writer, files []file) error {
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	tw := tar.NewWriter(w)
	for i, f := range sorted {
		if i > 0 && sorted[i-1].name == f.name {
			return fmt.Errorf("%s: listed twice", f.name)
		}
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: epoch, Format: tar.FormatUSTAR}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return tw.Close()
}

// gzipBytes compresses data with no file name and no time in the header.
func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	zw.ModTime = time.Time{} // header MTIME 0: no time recorded
	zw.OS = 255              // unknown, whatever the build host
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
