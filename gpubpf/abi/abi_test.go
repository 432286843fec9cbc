package abi

import (
	"os"
	"reflect"
	"regexp"
	"testing"
)

// The ABI numbers are generated from the headers (abi_gen.go); what stays
// hand-written in Go must agree with them: abi.Ctx, which the verifier
// reads field by field, has the header's offsets and sizes, and every
// helper the header defines has a name here.
func TestCtxIsTheHeaders(t *testing.T) {
	want := []struct {
		name      string
		off, size uintptr
	}{
		{"KernelID", ctxOffKernelID, ctxSizeKernelID},
		{"TenantID", ctxOffTenantID, ctxSizeTenantID},
		{"Attach", ctxOffAttach, ctxSizeAttach},
		{"LaunchNs", ctxOffLaunchNs, ctxSizeLaunchNs},
	}
	typ := reflect.TypeOf(Ctx{})
	if typ.NumField() != len(want) || typ.Size() != CtxSize {
		t.Fatalf("abi.Ctx: %d fields, %d bytes; struct gpuext_probe_ctx: %d fields, %d bytes", typ.NumField(), typ.Size(), len(want), CtxSize)
	}
	for i, w := range want {
		f := typ.Field(i)
		if f.Name != w.name || f.Offset != w.off || f.Type.Size() != w.size {
			t.Errorf("abi.Ctx field %d: %s at %d (%d bytes), the header: %s at %d (%d bytes)", i, f.Name, f.Offset, f.Type.Size(), w.name, w.off, w.size)
		}
	}
}

func TestHelperNamesAreTheHeaders(t *testing.T) {
	if len(HelperNames) != len(helperNumbers) {
		t.Errorf("HelperNames has %d helpers, the header %d", len(HelperNames), len(helperNumbers))
	}
	for _, n := range helperNumbers {
		if _, ok := HelperNames[n]; !ok {
			t.Errorf("helper %d of the header has no name in HelperNames", n)
		}
	}
	// abigen.c lists the helpers by name: one added to the header and not
	// there would have no Go constant.
	src, err := os.ReadFile("../../kmod/include/gpuext_abi.h")
	if err != nil {
		t.Fatal(err)
	}
	defined := regexp.MustCompile(`(?m)^#define GPUEXT_PH_([A-Z0-9_]+) \d+`).FindAllSubmatch(src, -1)
	if n := len(defined) - 1; n != len(helperNumbers) { // GPUEXT_PH_BASE is no helper
		t.Errorf("gpuext_abi.h defines %d helpers, abigen.c generates %d: add the new one to its HELPERS list", n, len(helperNumbers))
	}
}
