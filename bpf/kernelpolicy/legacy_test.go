package kernelpolicy

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// An object with its ops in the legacy .struct_ops section reads exactly
// like the same source with SEC(".struct_ops.link"): one struct_ops map
// flagged for a link, its program attached to the same member.
func TestLegacyStructOpsReadAsLink(t *testing.T) {
	legacy, err := parseObject("fx_legacy.bpf.o", fixture(t, "fx_legacy.bpf.o"))
	if err != nil {
		t.Fatalf("legacy object: %v", err)
	}
	modern, err := parseObject("fx_mem.bpf.o", fixture(t, "fx_mem.bpf.o"))
	if err != nil {
		t.Fatal(err)
	}
	lm, err := opsMapSpec(legacy)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := opsMapSpec(modern)
	if err != nil {
		t.Fatal(err)
	}
	if lm.Name != "fx_legacy_ops" || lm.Flags != mm.Flags || mm.Flags == 0 {
		t.Errorf("legacy ops map %s flags %#x, want fx_legacy_ops with the link flag %#x", lm.Name, lm.Flags, mm.Flags)
	}
	if lm.Value.(*btf.Struct).Name != memOpsType || lm.ValueSize != mm.ValueSize {
		t.Errorf("legacy ops value %s (%d bytes), want %s (%d bytes)", lm.Value.(*btf.Struct).Name, lm.ValueSize, memOpsType, mm.ValueSize)
	}
	p := legacy.Programs["fx_evict"]
	if p == nil || p.Type != ebpf.StructOps || p.AttachTo != memOpsType+":evict_prepare" {
		t.Errorf("legacy program %+v, want fx_evict attached to %s:evict_prepare", p, memOpsType)
	}
	// A descriptor check passes as for any SDK object.
	d := &Descriptor{Name: "fx", Kind: "memory", Eviction: &AlgorithmDescriptor{}}
	if err := checkObject(legacy, d, "fx_legacy.bpf.o"); err != nil {
		t.Errorf("check: %v", err)
	}
}

func TestLegacyAsLinkKeepsOtherObjects(t *testing.T) {
	data := fixture(t, "fx_mem.bpf.o")
	out, legacy, err := legacyAsLink(data)
	if err != nil || legacy || !bytes.Equal(out, data) {
		t.Errorf("modern object: legacy %v err %v, changed %v; want it untouched", legacy, err, !bytes.Equal(out, data))
	}
}

func TestRenameDatasecErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"short", []byte{0x9f, 0xeb}, "bad header"},
		{"bad magic", make([]byte, 24), "bad header"},
		{"outside", btfHeader(24, 0, 100, 0, 0), "outside"},
		{"no datasec", btfHeader(24, 0, 0, 0, 1), "no datasec"},
	} {
		_, err := renameDatasec(tc.raw, binary.LittleEndian, legacyOpsSec, linkOpsSec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func btfHeader(hdrLen, typeOff, typeLen, strOff, strLen uint32) []byte {
	b := make([]byte, 24+strLen)
	binary.LittleEndian.PutUint16(b, 0xeb9f)
	b[2] = 1
	for i, v := range []uint32{hdrLen, typeOff, typeLen, strOff, strLen} {
		binary.LittleEndian.PutUint32(b[4+4*i:], v)
	}
	return b
}
