package devmap

import (
	"encoding/binary"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func image(t *testing.T, typ abi.MapType, key, value, max uint32) *Image {
	t.Helper()
	l, err := abi.Layout(typ, key, value, max)
	if err != nil {
		t.Fatal(err)
	}
	return NewImage(l)
}

// The helpers' results as the kernel gives them, and the bytes the host
// decodes afterwards: an array's elements always exist, a hash holds at
// most max_entries keys, a full ring drops and counts.
func TestKernelSemantics(t *testing.T) {
	arr := image(t, abi.MapArray, 4, 8, 2)
	if got := arr.Update(u32(1), u64(7), FlagNoExist, 0); got != -EEXIST {
		t.Errorf("array update NOEXIST = %d, want -EEXIST", got)
	}
	if got := arr.Update(u32(2), u64(7), FlagAny, 0); got != -E2BIG {
		t.Errorf("array update past max_entries = %d, want -E2BIG", got)
	}
	if got := arr.Update(u32(1), u64(7), FlagAny, 0); got != 0 {
		t.Errorf("array update = %d", got)
	}
	if got := arr.Delete(u32(1)); got != -EINVAL {
		t.Errorf("array delete = %d, want -EINVAL", got)
	}
	ents, err := arr.Entries()
	if err != nil || len(ents) != 2 || binary.LittleEndian.Uint64(ents[1].Value) != 7 || binary.LittleEndian.Uint64(ents[0].Value) != 0 {
		t.Errorf("array entries %v, %v; want [0 7]", ents, err)
	}

	h := image(t, abi.MapHash, 8, 8, 2)
	for k, want := range []int64{0, 0, -E2BIG} {
		if got := h.Update(u64(uint64(k)), u64(uint64(k)*10), FlagAny, 0); got != want {
			t.Errorf("hash insert of key %d = %d, want %d", k, got, want)
		}
	}
	if got := h.Update(u64(5), u64(1), FlagExist, 0); got != -ENOENT {
		t.Errorf("hash update EXIST of a missing key = %d, want -ENOENT", got)
	}
	if got := h.Delete(u64(0)); got != 0 {
		t.Errorf("hash delete = %d", got)
	}
	if got := h.Update(u64(2), u64(20), FlagNoExist, 0); got != 0 {
		t.Errorf("hash insert after a delete = %d, want 0 (the place was given back)", got)
	}
	if off := h.Lookup(u64(2), 0); off == 0 || binary.LittleEndian.Uint64(h.Bytes[off:]) != 20 {
		t.Errorf("hash lookup of key 2 at %d", off)
	}
	if ents, err := h.Entries(); err != nil || len(ents) != 2 {
		t.Errorf("hash entries %v, %v; want 2 live keys", ents, err)
	}

	rb := image(t, abi.MapRingbuf, 0, 0, 32)
	for i, want := range []int64{0, 0, -EAGAIN} {
		if got := rb.RingbufOutput([]byte{byte(i), 1, 2}, 0); got != want {
			t.Errorf("ringbuf output %d = %d, want %d", i, got, want)
		}
	}
	if got := rb.RingbufOutput([]byte{1}, 4); got != -EINVAL {
		t.Errorf("ringbuf output with unknown flags = %d, want -EINVAL", got)
	}
	if dropped := abi.RingDropped(rb.Layout, rb.Bytes[abi.MapHdrSize:]); dropped != 1 {
		t.Errorf("ringbuf dropped %d, want 1", dropped)
	}
	if ents, err := rb.Entries(); err != nil || len(ents) != 2 || len(ents[1].Value) != 3 || ents[1].Value[0] != 1 {
		t.Errorf("ringbuf records %v, %v; want two 3-byte records", ents, err)
	}
}
