package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

const fixtures = "../../bpf/kernelpolicy/testdata/objects"

// policies attach --object and a kernelPolicyDir policy by NAME: the errors
// a user gets before anything is loaded (a missing core says how to load
// it, an object built for another ABI names both versions, usage errors).
func TestAttachObjectErrors(t *testing.T) {
	nocore := filepath.Join(t.TempDir(), "gpuext")
	oldCore := t.TempDir()
	os.WriteFile(filepath.Join(oldCore, "ops"), nil, 0o644)
	os.WriteFile(filepath.Join(oldCore, "abi_version"), []byte("7\n"), 0o644)
	policyDir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(fixtures, "fx_mem.bpf.o"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(policyDir, "mine.bpf.o"), data, 0o644)
	os.WriteFile(filepath.Join(policyDir, "mine.json"), []byte(`{"name": "mine", "kind": "memory", "eviction": {}}`), 0o644)
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfgFile, []byte(`{"kernelPolicyDir": "`+policyDir+`"}`), 0o644)

	for _, tc := range []struct {
		args []string
		want []string
		is   error
	}{
		{[]string{"policies", "attach", "--debugfs", nocore, "--pin-dir", t.TempDir(), "--object", filepath.Join(fixtures, "fx_mem.bpf.o")},
			[]string{"modprobe gpuext"}, kernelpolicy.ErrNoCore},
		{[]string{"--config", cfgFile, "policies", "attach", "--debugfs", nocore, "--pin-dir", t.TempDir(), "mine"},
			[]string{`attach "mine"`, "modprobe gpuext"}, kernelpolicy.ErrNoCore},
		{[]string{"policies", "attach", "--debugfs", oldCore, "--pin-dir", t.TempDir(), "--object", filepath.Join(fixtures, "fx_mem.bpf.o"), "--name", "mine"},
			[]string{"ABI version 7", "this build has ABI version 1"}, kernelpolicy.ErrABIMismatch},
		{[]string{"policies", "attach", "--debugfs", nocore, "--object", filepath.Join(fixtures, "fx_abi99.bpf.o")},
			[]string{"fx_abi99.bpf.o was built for gpuext ABI version 99", "this gpuext has ABI version 1"}, kernelpolicy.ErrABIMismatch},
		{[]string{"policies", "attach", "--debugfs", nocore, "--object", filepath.Join(fixtures, "fx_legacy.bpf.o")},
			[]string{`attach "fx-legacy"`, "modprobe gpuext"}, kernelpolicy.ErrNoCore}, // legacy .struct_ops is read as .struct_ops.link
		{[]string{"policies", "attach", "--debugfs", nocore, "--object", filepath.Join(fixtures, "fx_legacy_nobtf.bpf.o")},
			[]string{"legacy .struct_ops section", "no .BTF"}, kernelpolicy.ErrBadPolicyDir},
		{[]string{"policies", "attach", "--object", filepath.Join(fixtures, "fx_mem.bpf.o"), "--name", "Bad"},
			[]string{`--name: "Bad" must match`}, kernelpolicy.ErrBadPolicyDir},
		{[]string{"policies", "attach", "--object", filepath.Join(fixtures, "fx_mem.bpf.o"), "fifo"},
			[]string{"no NAME with --object"}, nil},
		{[]string{"--config", cfgFile, "policies", "attach"}, []string{"known:", "fifo", "mine"}, nil},
	} {
		err := run(tc.args, &bytes.Buffer{})
		if err == nil {
			t.Errorf("gpuextctl %v: no error, want %q", tc.args, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("gpuextctl %v: %v, want it to say %q", tc.args, err, w)
			}
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("gpuextctl %v: %v is not %v", tc.args, err, tc.is)
		}
	}
}

// A bad kernelPolicyDir stops every command that reads the catalog, naming the file and the field.
func TestBadKernelPolicyDir(t *testing.T) {
	policyDir := t.TempDir()
	os.WriteFile(filepath.Join(policyDir, "mine.json"), []byte(`{"name": "mine", "knd": "memory"}`), 0o644)
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfgFile, []byte(`{"kernelPolicyDir": "`+policyDir+`"}`), 0o644)
	err := run([]string{"--config", cfgFile, "policies"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "mine.json") || !strings.Contains(err.Error(), `unknown field "knd"`) {
		t.Errorf("policies with a bad kernelPolicyDir: %v", err)
	}
}
