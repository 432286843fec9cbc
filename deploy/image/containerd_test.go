package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/test/lab"
)

// The image as a user gets it: built from the real static binaries,
// imported into a real containerd with `ctr images import`, run with
// `ctr run`: both entry points answer --help, and `gpuextctl setup-node`
// with its defaults installs the image's device runtime into the host
// directory given to the container.
func TestImageImportsAndRunsInContainerd(t *testing.T) {
	testutil.RequireRoot(t)
	fixtures(t)
	bin := t.TempDir()
	repo := testutil.RepoRoot()
	for name, pkg := range map[string]string{
		"gpuext-nri-plugin": "./nri-plugin", "gpuext-oci-hook": "./oci-hook/cmd/gpuext-oci-hook",
		"gpuext-runc": "./oci-hook/cmd/gpuext-runc", "gpuextctl": "./cmd/gpuextctl",
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, name), pkg)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	// the device runtime is only copied here, never loaded: the fixture
	// stands in for it (devrt/ has its own tests)
	os.MkdirAll(filepath.Join(bin, "devrt"), 0o755) //nolint:errcheck
	if err := os.WriteFile(filepath.Join(bin, DevrtLibrary), fixture.pie, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(bin)
	spec.Name = "localhost/gpuext:import-test"
	archive, res := build(t, spec)
	tarPath := filepath.Join(t.TempDir(), "gpuext-image.tar")
	if err := os.WriteFile(tarPath, archive, 0o644); err != nil {
		t.Fatal(err)
	}

	c := lab.StartContainerd(t, lab.ContainerdOptions{})
	ctr := func(args ...string) (string, error) {
		cmd := exec.Command(c.Env["GPUEXT_LAB_CTR"], append([]string{"--address", c.Address, "--namespace", "k8s.io"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := ctr("images", "import", tarPath); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls", "name=="+spec.Name)
	if err != nil || !strings.Contains(out, res.Manifest.String()) {
		t.Fatalf("ctr images ls after import: %v\n%s\nwant %s with manifest %s", err, out, spec.Name, res.Manifest)
	}

	out, err = ctr("run", "--rm", spec.Name, "gpuext-image-ctl", "/usr/local/bin/gpuextctl", "--help")
	if err != nil || !strings.Contains(out, "Usage: gpuextctl") || !strings.Contains(out, "setup-node") {
		t.Errorf("gpuextctl --help in the image: %v\n%s", err, out)
	}
	out, err = ctr("run", "--rm", spec.Name, "gpuext-image-help", "/usr/local/bin/gpuext-nri-plugin", "--help")
	if err != nil || !strings.Contains(out, "Usage: gpuext-nri-plugin") {
		t.Errorf("gpuext-nri-plugin --help in the image: %v\n%s", err, out)
	}
	// the entrypoint is the agent: alone, it dials containerd's NRI socket
	out, err = ctr("run", "--rm", spec.Name, "gpuext-image-agent")
	if err == nil || !strings.Contains(out, "gpuext-nri-plugin: failed to connect to NRI service: dial unix /var/run/nri/nri.sock") {
		t.Errorf("the image's entrypoint: %v\n%s\nwant the agent failing to reach /var/run/nri/nri.sock", err, out)
	}

	host := t.TempDir()
	out, err = ctr("run", "--rm", "--privileged",
		"--mount", "type=bind,src="+host+",dst=/opt/gpuext/devrt,options=rbind:rw",
		"--mount", "type=bind,src=/sys/fs/bpf,dst=/sys/fs/bpf,options=rbind:rw",
		spec.Name, "gpuext-image-setup", "/usr/local/bin/gpuextctl", "setup-node")
	if err != nil || !strings.Contains(out, "devrt: installed /opt/gpuext/devrt/libgpuext-devrt.so") {
		t.Fatalf("gpuextctl setup-node in the image: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(host, "libgpuext-devrt.so"))
	if err != nil || !bytes.Equal(got, fixture.pie) {
		t.Errorf("the host's devrt dir after setup-node: %v, %d bytes; want the image's %s (%d bytes)",
			err, len(got), DevrtLibrary, len(fixture.pie))
	}
}
