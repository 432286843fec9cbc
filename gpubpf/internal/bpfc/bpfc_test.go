package bpfc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
)

// A probe source that includes the ABI header compiles into an object whose
// program sits in the device section.
func TestCompileProbe(t *testing.T) {
	src := filepath.Join(t.TempDir(), "p.bpf.c")
	code := `#include <linux/types.h>
#include "gpuext_abi.h"
__attribute__((section(GPUEXT_PROBE_SEC_ENTRY), used))
int p(struct gpuext_probe_ctx *ctx) { return ctx->attach; }
char LICENSE[] __attribute__((section("license"), used)) = "GPL";
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := Compile(t, src, ABIIncludeDir(t))
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	p := spec.Programs["p"]
	if p == nil || p.SectionName != "gpuext/kernel_entry" {
		t.Fatalf("program p: %+v", p)
	}
}
