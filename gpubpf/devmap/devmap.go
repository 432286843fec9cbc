package devmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// Errno values the device helpers return negated, as the kernel does.
const (
	ENOENT = 2
	E2BIG  = 7
	EAGAIN = 11
	EEXIST = 17
	EINVAL = 22
)

// Update flags of map_update_elem.
const (
	FlagAny     = 0
	FlagNoExist = 1
	FlagExist   = 2
)

// HashState values of a device hash bucket.
const (
	BucketEmpty   = 0
	BucketWriting = 1
	BucketLive    = 2
	BucketDeleted = 3
)

// DeviceMapType maps a kernel map type to its device map type.
func DeviceMapType(t ebpf.MapType) (abi.MapType, error) {
	dm, err := abi.DeviceMapOf(uint32(t), 1, 1, 0)
	if err != nil {
		return 0, fmt.Errorf("map type %s has no device map type", t)
	}
	return dm.Type, nil
}

// SpecLayout is the device layout of a map spec (abi.KernelMapLayout:
// the kernel's map types, gpuext's per-thread array and bpftime's GPU
// map types).
func SpecLayout(ms *ebpf.MapSpec) (abi.MapLayout, error) {
	l, _, err := abi.KernelMapLayout(uint32(ms.Type), ms.KeySize, ms.ValueSize, ms.MaxEntries, ms.MapExtra)
	if err != nil {
		return l, fmt.Errorf("map %q: %w", ms.Name, err)
	}
	return l, nil
}

// Descriptor is the 32-byte struct gpuext_dmap at the head of a map symbol.
func Descriptor(l abi.MapLayout) []byte {
	b := make([]byte, abi.MapHdrSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(l.Type))
	le.PutUint32(b[4:], l.KeySize)
	le.PutUint32(b[8:], l.ValueSize)
	le.PutUint32(b[12:], l.MaxEntries)
	le.PutUint32(b[16:], l.NBuckets)
	le.PutUint32(b[20:], l.Stride)
	le.PutUint64(b[24:], l.DataSize)
	return b
}

// KeyHash is the device hash of a key: FNV-1a 32 of its bytes.
func KeyHash(key []byte) uint32 {
	h := fnv.New32a()
	h.Write(key)
	return h.Sum32()
}

func round8(n uint32) uint32 { return (n + 7) &^ 7 }

// Image is the bytes of a map symbol: descriptor, then data.
type Image struct {
	Layout abi.MapLayout
	Bytes  []byte
}

// NewImage is an empty map: the descriptor, then zeroed data.
func NewImage(l abi.MapLayout) *Image {
	b := make([]byte, abi.MapHdrSize+int(l.DataSize))
	copy(b, Descriptor(l))
	return &Image{Layout: l, Bytes: b}
}

func (im *Image) data() []byte { return im.Bytes[abi.MapHdrSize:] }

// Slot is the per-warp slot of a warp: (smid*64 + warpid) % MapWarpSlots,
// where warpid is the %warpid special register.
func Slot(smid, warpid uint32) uint32 {
	return (smid*64 + warpid) % abi.MapWarpSlots
}

// The methods below are the executable specification of the device helper
// library (gpubpf/helpers): ptxinterp runs them on the map symbols of
// the module it executes, and the CUDA helpers must leave the same bytes
// behind. They take the image of one map symbol, key and value bytes, and
// return offsets into Bytes (of the value) or 0 / -errno as the kernel does.
//
//	ARRAY    lookup: index = u32 key; index >= max_entries -> NULL, else
//	         the value at 32 + index*stride + 8. update: flags > BPF_EXIST
//	         -> -EINVAL, index >= max_entries -> -E2BIG, BPF_NOEXIST ->
//	         -EEXIST; a value of <= 8 bytes is stored as one 8-byte word
//	         (zero padded; the device uses one atomic exchange); a larger
//	         value bumps the entry's seq word to odd, copies, bumps it to
//	         even (seq grows by 2 per update). delete -> -EINVAL.
//	HASH     h = FNV-1a 32 of the key_size key bytes; buckets are probed
//	         linearly from h & (nbuckets-1), nbuckets at most. A bucket is
//	         [u32 state][u32 h][key, zero padded to 8][value, zero padded].
//	         lookup: stop at an EMPTY bucket; match LIVE buckets with equal
//	         h and key. update: an existing entry -> -EEXIST under
//	         BPF_NOEXIST, else the value is overwritten in place (larger
//	         than 8 bytes: state LIVE->WRITING->LIVE around the copy); a
//	         missing one -> -ENOENT under BPF_EXIST, else the first EMPTY or
//	         DELETED bucket of the probe sequence is claimed (CAS to
//	         WRITING), h, key and value written, state set LIVE; no bucket
//	         free -> -E2BIG. The u64 after the buckets counts live entries:
//	         a new key when it is max_entries -> -E2BIG (as the kernel).
//	         delete: the matching LIVE bucket becomes DELETED and the count
//	         drops, else -ENOENT. (Concurrent inserts of one key on the
//	         device: the copy in the earliest bucket of the sequence stays,
//	         the inserters of later ones delete them, see helpers.cu.)
//	PER_WARP as ARRAY without the seq word, in the row of the calling
//	         warp's Slot: 32 + (slot*max_entries + index)*stride.
//	PER_THREAD as PER_WARP, in the row of the calling thread: slot is its
//	         linear id in the launch (abi.HelperGlobalThreadID); a thread
//	         with slot >= nbuckets has no row: lookup -> NULL and update ->
//	         -E2BIG, each adding 1 to the no-row count after the rows
//	         (stripes, abi.PerThreadNoRow; the host reports them). The
//	         device does it inline (no helper call).
//	RINGBUF  output: rec = 8 + round8(size); pos = head; pos + rec >
//	         max_entries -> dropped += 1, -EAGAIN (head never passes
//	         max_entries); else head = pos + rec (the device: a CAS loop on
//	         head) and [u32 size][u32 0][data, zero padded] is written at
//	         32 + 16 + pos. flags
//	         other than BPF_RB_NO_WAKEUP|BPF_RB_FORCE_WAKEUP -> -EINVAL.
//	         lookup/update/delete on it -> NULL / -EINVAL.

// Lookup returns the offset in Bytes of key's value, or 0 when absent.
func (im *Image) Lookup(key []byte, slot uint32) uint64 {
	l := im.Layout
	d := im.data()
	le := binary.LittleEndian
	switch l.Type {
	case abi.MapArray, abi.MapPerWarp:
		idx := le.Uint32(key)
		if idx >= l.MaxEntries {
			return 0
		}
		if l.Type == abi.MapArray {
			return abi.MapHdrSize + uint64(idx)*uint64(l.Stride) + 8
		}
		return abi.MapHdrSize + (uint64(slot)*uint64(l.MaxEntries)+uint64(idx))*uint64(l.Stride)
	case abi.MapPerThread:
		if slot >= l.NBuckets {
			im.noRow()
			return 0
		}
		idx := le.Uint32(key)
		if idx >= l.MaxEntries {
			return 0
		}
		return abi.MapHdrSize + (uint64(slot)*uint64(l.MaxEntries)+uint64(idx))*uint64(l.Stride)
	case abi.MapHash:
		h := KeyHash(key[:l.KeySize])
		mask := l.NBuckets - 1
		for n := uint32(0); n < l.NBuckets; n++ {
			off := uint64((h+n)&mask) * uint64(l.Stride)
			b := d[off:]
			st := le.Uint32(b)
			if st == BucketEmpty {
				return 0
			}
			if st == BucketLive && le.Uint32(b[4:]) == h && bytes.Equal(b[8:8+l.KeySize], key[:l.KeySize]) {
				return abi.MapHdrSize + off + 8 + uint64(round8(l.KeySize))
			}
		}
	}
	return 0
}

// Update stores key -> value; 0 or -errno.
func (im *Image) Update(key, value []byte, flags uint64, slot uint32) int64 {
	l := im.Layout
	d := im.data()
	le := binary.LittleEndian
	if l.Type == abi.MapRingbuf || flags > FlagExist {
		return -EINVAL
	}
	switch l.Type {
	case abi.MapArray, abi.MapPerWarp, abi.MapPerThread:
		idx := le.Uint32(key)
		if l.Type == abi.MapPerThread && slot >= l.NBuckets {
			im.noRow()
			return -E2BIG
		}
		if idx >= l.MaxEntries {
			return -E2BIG
		}
		if flags == FlagNoExist {
			return -EEXIST
		}
		off := im.Lookup(key, slot)
		v := im.Bytes[off : off+uint64(round8(l.ValueSize))]
		if l.Type == abi.MapArray && l.ValueSize > 8 {
			seq := im.Bytes[off-8:]
			le.PutUint64(seq, le.Uint64(seq)+1)
			clear(v)
			copy(v, value[:l.ValueSize])
			le.PutUint64(seq, le.Uint64(seq)+1)
			return 0
		}
		clear(v)
		copy(v, value[:l.ValueSize])
		return 0
	case abi.MapHash:
		if off := im.Lookup(key, slot); off != 0 {
			if flags == FlagNoExist {
				return -EEXIST
			}
			v := im.Bytes[off : off+uint64(round8(l.ValueSize))]
			clear(v)
			copy(v, value[:l.ValueSize])
			return 0
		}
		if flags == FlagExist {
			return -ENOENT
		}
		count := d[uint64(l.NBuckets)*uint64(l.Stride):]
		if le.Uint64(count) >= uint64(l.MaxEntries) {
			return -E2BIG
		}
		h := KeyHash(key[:l.KeySize])
		mask := l.NBuckets - 1
		for n := uint32(0); n < l.NBuckets; n++ {
			b := d[uint64((h+n)&mask)*uint64(l.Stride):]
			st := le.Uint32(b)
			if st == BucketEmpty || st == BucketDeleted {
				le.PutUint32(b, BucketWriting)
				le.PutUint32(b[4:], h)
				k := b[8 : 8+round8(l.KeySize)]
				clear(k)
				copy(k, key[:l.KeySize])
				v := b[8+round8(l.KeySize) : 8+round8(l.KeySize)+round8(l.ValueSize)]
				clear(v)
				copy(v, value[:l.ValueSize])
				le.PutUint32(b, BucketLive)
				le.PutUint64(count, le.Uint64(count)+1)
				return 0
			}
		}
		return -E2BIG
	}
	return -EINVAL
}

// noRow counts a per-thread map access by a thread past the last row (in
// the first stripe: the Go model has no SMs; the sum is what counts).
func (im *Image) noRow() {
	w := im.data()[uint64(im.Layout.NBuckets)*uint64(im.Layout.MaxEntries)*uint64(im.Layout.Stride):]
	binary.LittleEndian.PutUint64(w, binary.LittleEndian.Uint64(w)+1)
}

// NoRow is the number of per-thread map accesses by threads past its rows:
// the sum of the stripes.
func (im *Image) NoRow() uint64 {
	if im.Layout.Type != abi.MapPerThread {
		return 0
	}
	return abi.PerThreadNoRow(im.Layout, im.data())
}

// Delete removes key from a hash; 0 or -errno.
func (im *Image) Delete(key []byte) int64 {
	if im.Layout.Type != abi.MapHash {
		return -EINVAL
	}
	off := im.Lookup(key, 0)
	if off == 0 {
		return -ENOENT
	}
	b := im.Bytes[off-8-uint64(round8(im.Layout.KeySize)):]
	binary.LittleEndian.PutUint32(b, BucketDeleted)
	count := im.data()[uint64(im.Layout.NBuckets)*uint64(im.Layout.Stride):]
	binary.LittleEndian.PutUint64(count, binary.LittleEndian.Uint64(count)-1)
	return 0
}

// Ringbuf flags accepted by ringbuf_output.
const ringbufFlags = 1 | 2

// RingbufOutput appends a record; 0 or -errno.
func (im *Image) RingbufOutput(data []byte, flags uint64) int64 {
	l := im.Layout
	if l.Type != abi.MapRingbuf || flags&^ringbufFlags != 0 {
		return -EINVAL
	}
	d := im.data()
	le := binary.LittleEndian
	rec := 8 + uint64(round8(uint32(len(data))))
	pos := le.Uint64(d)
	if pos+rec > uint64(l.MaxEntries) {
		le.PutUint64(d[8:], le.Uint64(d[8:])+1)
		return -EAGAIN
	}
	le.PutUint64(d, pos+rec)
	r := d[16+pos : 16+pos+rec]
	clear(r)
	le.PutUint32(r, uint32(len(data)))
	copy(r[8:], data)
	return 0
}

// Entry is one key/value of a decoded map.
type Entry struct {
	Key, Value []byte
}

// Entries decodes a map image into its entries, ordered by key bytes:
// every index of an array, the live buckets of a hash, and for a per-warp
// or per-thread array every index with its value summed over all slots
// (rows) as little-endian u64 words (the host's view). A ringbuf decodes to its records, keyed by
// their 8-byte little-endian sequence number.
func (im *Image) Entries() ([]Entry, error) {
	l := im.Layout
	d := im.data()
	le := binary.LittleEndian
	var out []Entry
	key := func(i uint32) []byte { k := make([]byte, 4); le.PutUint32(k, i); return k }
	switch l.Type {
	case abi.MapArray:
		for i := uint32(0); i < l.MaxEntries; i++ {
			off := uint64(i) * uint64(l.Stride)
			out = append(out, Entry{key(i), bytes.Clone(d[off+8 : off+8+uint64(l.ValueSize)])})
		}
	case abi.MapPerWarp, abi.MapPerThread:
		slots := uint64(abi.MapWarpSlots)
		if l.Type == abi.MapPerThread {
			slots = uint64(l.NBuckets)
		}
		for i := uint32(0); i < l.MaxEntries; i++ {
			sum := make([]byte, l.Stride)
			for s := uint64(0); s < slots; s++ {
				off := (s*uint64(l.MaxEntries) + uint64(i)) * uint64(l.Stride)
				for w := uint32(0); w < l.Stride; w += 8 {
					le.PutUint64(sum[w:], le.Uint64(sum[w:])+le.Uint64(d[off+uint64(w):]))
				}
			}
			out = append(out, Entry{key(i), sum[:l.ValueSize]})
		}
	case abi.MapHash:
		for i := uint32(0); i < l.NBuckets; i++ {
			b := d[uint64(i)*uint64(l.Stride):]
			if le.Uint32(b) != BucketLive {
				continue
			}
			kv := 8 + round8(l.KeySize)
			out = append(out, Entry{bytes.Clone(b[8 : 8+l.KeySize]), bytes.Clone(b[kv : kv+l.ValueSize])})
		}
		sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	case abi.MapRingbuf:
		head := le.Uint64(d)
		log := d[16:]
		for pos, n := uint64(0), uint64(0); pos+8 <= head && pos+8 <= uint64(len(log)); n++ {
			ln := uint64(le.Uint32(log[pos:]))
			if pos+8+ln > uint64(len(log)) {
				return nil, fmt.Errorf("ringbuf record at %d overruns the log", pos)
			}
			k := make([]byte, 8)
			le.PutUint64(k, n)
			out = append(out, Entry{k, bytes.Clone(log[pos+8 : pos+8+ln])})
			pos += 8 + uint64(round8(uint32(ln)))
		}
	default:
		return nil, fmt.Errorf("map type %s: cannot decode", l.Type)
	}
	return out, nil
}

// MapImage is the initial image of a map spec: its descriptor and its
// Contents (arrays and hashes) laid out as the device helpers would.
func MapImage(ms *ebpf.MapSpec) (*Image, error) {
	l, err := SpecLayout(ms)
	if err != nil {
		return nil, err
	}
	im := NewImage(l)
	for _, kv := range ms.Contents {
		if l.Type != abi.MapArray && l.Type != abi.MapHash {
			return nil, fmt.Errorf("map %q: initial contents of a %s map are not supported", ms.Name, l.Type)
		}
		k, err := toBytes(kv.Key, l.KeySize)
		if err != nil {
			return nil, fmt.Errorf("map %q key: %w", ms.Name, err)
		}
		v, err := toBytes(kv.Value, l.ValueSize)
		if err != nil {
			return nil, fmt.Errorf("map %q value: %w", ms.Name, err)
		}
		if rc := im.Update(k, v, FlagAny, 0); rc != 0 {
			return nil, fmt.Errorf("map %q: initial update: errno %d", ms.Name, -rc)
		}
	}
	return im, nil
}

func toBytes(v any, size uint32) ([]byte, error) {
	var b []byte
	switch x := v.(type) {
	case []byte:
		b = x
	default:
		var err error
		b, err = binary.Append(nil, binary.LittleEndian, v)
		if err != nil {
			return nil, err
		}
	}
	if uint32(len(b)) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}
