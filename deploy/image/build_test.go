package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

var fixture struct {
	once             sync.Once
	dir              string // holds hello (static) and hello-pie (ET_DYN with a loader)
	err              error
	static, pie, lib []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// fixtures builds testdata/hello twice: static (an image binary) and as a
// PIE (the stand-in for the device runtime, an ET_DYN object).
func fixtures(t *testing.T) {
	t.Helper()
	fixture.once.Do(func() {
		fixture.dir, fixture.err = os.MkdirTemp("", "gpuext-image-fixture-")
		if fixture.err != nil {
			return
		}
		for _, b := range [][]string{{"-o", filepath.Join(fixture.dir, "hello")}, {"-buildmode=pie", "-o", filepath.Join(fixture.dir, "hello-pie")}} {
			cmd := exec.Command("go", append(append([]string{"build", "-trimpath"}, b...), "./testdata/hello")...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				fixture.err = err
				os.Stderr.Write(out)
				return
			}
		}
		fixture.static, fixture.err = os.ReadFile(filepath.Join(fixture.dir, "hello"))
		if fixture.err == nil {
			fixture.pie, fixture.err = os.ReadFile(filepath.Join(fixture.dir, "hello-pie"))
		}
	})
	if fixture.err != nil {
		t.Fatalf("build fixtures: %v", fixture.err)
	}
}

// binDir writes a make-build-like bin dir: every binary a static ELF (each
// with its name appended, so that they differ), the device runtime the PIE.
func binDir(t *testing.T) string {
	t.Helper()
	fixtures(t)
	dir := t.TempDir()
	for _, b := range Binaries {
		if err := os.WriteFile(filepath.Join(dir, b), append(append([]byte(nil), fixture.static...), b...), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "devrt"), 0o755) //nolint:errcheck
	if err := os.WriteFile(filepath.Join(dir, DevrtLibrary), fixture.pie, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testSpec(dir string) Spec {
	return Spec{BinDir: dir, Name: "localhost/gpuext:test", Version: "v0.1.0-3-gabcdef0", Revision: "abcdef0123",
		Source: "https://example.org/gpuext", Created: time.Unix(1764547200, 0)}
}

func build(t *testing.T, spec Spec) ([]byte, Result) {
	t.Helper()
	var buf bytes.Buffer
	res, err := Build(spec, &buf)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return buf.Bytes(), res
}

func TestBuildIsReproducible(t *testing.T) {
	a := binDir(t)
	archiveA, resA := build(t, testSpec(a))
	// the same bytes in another directory, written later (other mtimes,
	// another umask): nothing of the build host may leak into the image
	b := binDir(t)
	old := time.Now().Add(-48 * time.Hour)
	for _, n := range Binaries {
		os.Chtimes(filepath.Join(b, n), old, old) //nolint:errcheck
		os.Chmod(filepath.Join(b, n), 0o700)      //nolint:errcheck
	}
	archiveB, resB := build(t, testSpec(b))
	if !bytes.Equal(archiveA, archiveB) || resA != resB {
		t.Fatalf("same inputs, different images: manifest %s vs %s, archive sha256 %s vs %s",
			resA.Manifest, resB.Manifest, digest.FromBytes(archiveA), digest.FromBytes(archiveB))
	}

	spec := testSpec(a)
	spec.Version = "v0.2.0"
	_, res := build(t, spec)
	if res.Manifest == resA.Manifest || res.Layer != resA.Layer {
		t.Errorf("another version label: manifest %s (was %s), layer %s (was %s); want a new manifest over the same layer",
			res.Manifest, resA.Manifest, res.Layer, resA.Layer)
	}
	f, _ := os.OpenFile(filepath.Join(a, "gpuextctl"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0}) //nolint:errcheck
	f.Close()
	_, res = build(t, testSpec(a))
	if res.DiffID == resA.DiffID || res.Manifest == resA.Manifest {
		t.Errorf("a changed binary kept layer %s and manifest %s", res.DiffID, res.Manifest)
	}
}

// tarEntries reads a tar, checking what every reproducible tar here must
// hold: names sorted, mtime 0, uid and gid 0 without names.
func tarEntries(t *testing.T, what string, r io.Reader) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	tr := tar.NewReader(r)
	headers, data := map[string]*tar.Header{}, map[string][]byte{}
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.Format != tar.FormatUSTAR {
			t.Errorf("%s: %s: mtime %v uid %d gid %d uname %q gname %q format %v; want 0, 0, 0, no names, USTAR",
				what, h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname, h.Format)
		}
		name := strings.TrimSuffix(h.Name, "/")
		names = append(names, name)
		headers[name] = h
		data[name], _ = io.ReadAll(tr)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("%s: entries not sorted: %v", what, names)
	}
	for _, n := range names {
		if d := path.Dir(n); d != "." && headers[d] == nil {
			t.Errorf("%s: %s has no entry for its directory %s", what, n, d)
		}
	}
	return headers, data
}

func unmarshal(t *testing.T, what string, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
}

func TestArchiveIsAnOCIImageLayout(t *testing.T) {
	dir := binDir(t)
	archive, res := build(t, testSpec(dir))
	headers, files := tarEntries(t, "archive", bytes.NewReader(archive))
	for name, h := range headers {
		want := int64(0o644)
		if h.Typeflag == tar.TypeDir {
			want = 0o755
		}
		if h.Mode != want {
			t.Errorf("archive: %s mode %o, want %o", name, h.Mode, want)
		}
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
	blob := func(d digest.Digest, size int64) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+d.Encoded()]
		if !ok || digest.FromBytes(b) != d || int64(len(b)) != size {
			t.Fatalf("blob %s (size %d): present %v, size %d", d, size, ok, len(b))
		}
		return b
	}
	var index v1.Index
	unmarshal(t, "index.json", files["index.json"], &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json: %d manifests, want 1", len(index.Manifests))
	}
	md := index.Manifests[0]
	if md.Digest != res.Manifest || md.Annotations[AnnotationImageName] != "localhost/gpuext:test" ||
		md.Annotations[v1.AnnotationRefName] != "test" || md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture != res.Arch {
		t.Errorf("index.json manifest: %+v, want %s named localhost/gpuext:test (ref.name test), linux/%s", md, res.Manifest, res.Arch)
	}
	var manifest v1.Manifest
	unmarshal(t, "manifest", blob(md.Digest, md.Size), &manifest)
	var cfg v1.Image
	unmarshal(t, "config", blob(manifest.Config.Digest, manifest.Config.Size), &cfg)
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != v1.MediaTypeImageLayerGzip {
		t.Fatalf("manifest layers: %+v, want one gzip layer", manifest.Layers)
	}
	layer := blob(manifest.Layers[0].Digest, manifest.Layers[0].Size)

	for k, want := range map[string]string{
		v1.AnnotationVersion: "v0.1.0-3-gabcdef0", v1.AnnotationRevision: "abcdef0123",
		v1.AnnotationSource: "https://example.org/gpuext", v1.AnnotationCreated: "2025-12-01T00:00:00Z", v1.AnnotationTitle: "gpuext",
	} {
		if cfg.Config.Labels[k] != want || manifest.Annotations[k] != want {
			t.Errorf("%s: label %q, annotation %q, want %q", k, cfg.Config.Labels[k], manifest.Annotations[k], want)
		}
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/usr/local/bin/gpuext-nri-plugin" || cfg.OS != "linux" {
		t.Errorf("config: entrypoint %v, os %s", cfg.Config.Entrypoint, cfg.OS)
	}

	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header: time %v, name %q; want neither", zr.ModTime, zr.Name)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest.FromBytes(plain) {
		t.Errorf("config diff_ids %v, the layer's uncompressed digest %s", cfg.RootFS.DiffIDs, digest.FromBytes(plain))
	}
	lh, lf := tarEntries(t, "layer", bytes.NewReader(plain))
	for _, b := range Binaries {
		want, _ := os.ReadFile(filepath.Join(dir, b))
		p := "usr/local/bin/" + b
		if h := lh[p]; h == nil || h.Mode != 0o755 || !bytes.Equal(lf[p], want) {
			t.Errorf("layer: %s missing, not 0755 or not the bin dir's bytes", p)
		}
	}
	if h := lh[ImageDevrtPath]; h == nil || !bytes.Equal(lf[ImageDevrtPath], fixture.pie) {
		t.Errorf("layer: %s missing or not %s", ImageDevrtPath, DevrtLibrary)
	}
	if h := lh["tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("layer: /tmp missing or not 1777")
	}
	if !strings.HasPrefix(string(lf["etc/passwd"]), "root:x:0:0:") {
		t.Errorf("layer: /etc/passwd = %q", lf["etc/passwd"])
	}
}

func TestBuildRefusesWhatCannotRunInTheImage(t *testing.T) {
	fixtures(t)
	for _, tc := range []struct {
		name    string
		change  func(dir string, spec *Spec)
		wantErr string
	}{
		{"dynamic binary", func(dir string, _ *Spec) {
			os.WriteFile(filepath.Join(dir, "gpuext-runc"), fixture.pie, 0o755) //nolint:errcheck
		}, "gpuext-runc is dynamically linked (interpreter /"},
		{"missing binary", func(dir string, _ *Spec) { os.Remove(filepath.Join(dir, "gpuext-oci-hook")) },
			"gpuext-oci-hook: no such file or directory (run make build)"},
		{"not ELF", func(dir string, _ *Spec) {
			os.WriteFile(filepath.Join(dir, "gpuextctl"), []byte("#!/bin/sh\n"), 0o755) //nolint:errcheck
		}, "gpuextctl: not an ELF file"},
		{"executable as devrt", func(dir string, _ *Spec) {
			os.WriteFile(filepath.Join(dir, DevrtLibrary), fixture.static, 0o755) //nolint:errcheck
		}, "libgpuext-devrt.so: ELF type ET_EXEC, want a shared library"},
		{"other arch", func(_ string, s *Spec) { s.Arch = "riscv64" }, "gpuext-nri-plugin is "},
		{"no tag", func(_ string, s *Spec) { s.Name = "localhost/gpuext" }, `image name "localhost/gpuext": want REPOSITORY:TAG`},
		{"upper case", func(_ string, s *Spec) { s.Name = "Localhost/gpuext:v1" }, `repository "Localhost/gpuext"`},
		{"bad tag", func(_ string, s *Spec) { s.Name = "localhost/gpuext:-v1" }, `tag "-v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := binDir(t)
			spec := testSpec(dir)
			tc.change(dir, &spec)
			var buf bytes.Buffer
			_, err := Build(spec, &buf)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			if buf.Len() != 0 {
				t.Errorf("%d bytes written for a refused image", buf.Len())
			}
		})
	}
}

func TestCreatedTime(t *testing.T) {
	for _, tc := range []struct {
		flag, env, want, wantErr string
	}{
		{"", "", "1970-01-01T00:00:00Z", ""},
		{"", "1764547200", "2025-12-01T00:00:00Z", ""},
		{"2026-01-02T03:04:05Z", "1764547200", "2026-01-02T03:04:05Z", ""},
		{"yesterday", "", "", `--created "yesterday"`},
		{"", "-5", "", `SOURCE_DATE_EPOCH "-5"`},
	} {
		got, err := createdTime(tc.flag, tc.env)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("createdTime(%q, %q): err %v, want %q", tc.flag, tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.UTC().Format(time.RFC3339) != tc.want {
			t.Errorf("createdTime(%q, %q) = %v, %v; want %s", tc.flag, tc.env, got, err, tc.want)
		}
	}
}
