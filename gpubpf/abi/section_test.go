package abi

import (
	"strings"
	"testing"
)

// bpftime's memory-access point is not read as the entry (or exit) of a
// kernel named __memcapture: it is no device attach point here, and
// RefusedSection says why; a kernel's own kprobe/KERNEL still is one.
func TestMemCaptureIsRefusedNotReinterpreted(t *testing.T) {
	for _, sec := range []string{"kprobe/__memcapture", "kretprobe/__memcapture", "kprobe/__memcapture/"} {
		if s, ok := ParseSection(sec); ok {
			t.Errorf("%s parsed as %+v, want no attach point", sec, s)
		}
		why, refused := RefusedSection(sec)
		if !refused || !strings.Contains(why, "every load and store") || !strings.Contains(why, "entry and exit only") {
			t.Errorf("%s: refused %v, %q", sec, refused, why)
		}
	}
	if s, ok := ParseSection("kprobe/_Z4gridPj"); !ok || s.Kernel != "_Z4gridPj" || s.Attach != KernelEntry {
		t.Errorf("kprobe/_Z4gridPj: %+v %v", s, ok)
	}
	if _, refused := RefusedSection("kprobe/_Z4gridPj"); refused {
		t.Error("kprobe/_Z4gridPj refused")
	}
}
