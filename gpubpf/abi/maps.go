package abi

import (
	"encoding/binary"
	"fmt"
)

// MapType is enum gpuext_dmap_type.
type MapType uint32

const (
	MapArray   MapType = dmapArray
	MapHash    MapType = dmapHash
	MapPerWarp MapType = dmapPerWarp
	MapRingbuf MapType = dmapRingbuf
	// MapPerThread: one row of max_entries values per thread of the
	// launch (GPUEXT_DMAP_PER_THREAD).
	MapPerThread MapType = dmapPerThread
)

// Per-thread map sizing: rows without map_extra, rows at most.
const (
	MapThreadSlots    = dmapThreadSlots
	MapMaxThreadSlots = dmapMaxThreadSlots
)

// Kernel map types (the BTF "type" of a map) the device holds beyond the
// kernel's own: gpuext's per-thread array, and bpftime's GPU map types.
const (
	MapTypePerThread   = mapTypePerThread
	BtMapGPUHash       = btMapGPUHash
	BtMapPerThread     = btMapPerThread
	BtMapGPUArray      = btMapGPUArray
	BtMapKernelShared  = btMapKernelShared
	BtMapPerThreadHost = btMapPerThreadHost
	BtMapGPUArrayHost  = btMapGPUArrayHost
	BtMapGPURingbuf    = btMapGPURingbuf
	BtRingbufThreads   = btRingbufThreads
	kernelArray        = 2  // BPF_MAP_TYPE_ARRAY
	kernelHash         = 1  // BPF_MAP_TYPE_HASH
	kernelPerCPUArray  = 6  // BPF_MAP_TYPE_PERCPU_ARRAY
	kernelRingbuf      = 27 // BPF_MAP_TYPE_RINGBUF
)

// DeviceMap is what a map of kernel (BTF) type t becomes on the device:
// its device type and the max_entries / slots of abi.Layout. perLane: a
// ring buffer every lane may write its own records to (bpftime's GPU
// ring buffer). extra is the map's map_extra (per-thread rows).
type DeviceMap struct {
	Type       MapType
	MaxEntries uint32 // RINGBUF: data bytes
	Slots      uint32 // PER_THREAD: rows
	PerLane    bool
}

// DeviceMapOf maps a kernel map type onto the device's; an error names a
// type the device does not hold or sizes it cannot.
func DeviceMapOf(t, valueSize, maxEntries uint32, extra uint64) (DeviceMap, error) {
	switch t {
	case kernelArray, BtMapGPUArray, BtMapKernelShared, BtMapGPUArrayHost:
		return DeviceMap{Type: MapArray, MaxEntries: maxEntries}, nil
	case kernelHash, BtMapGPUHash:
		return DeviceMap{Type: MapHash, MaxEntries: maxEntries}, nil
	case kernelPerCPUArray:
		return DeviceMap{Type: MapPerWarp, MaxEntries: maxEntries}, nil
	case kernelRingbuf:
		return DeviceMap{Type: MapRingbuf, MaxEntries: maxEntries}, nil
	case MapTypePerThread, BtMapPerThreadHost:
		slots := uint64(MapThreadSlots)
		if extra != 0 {
			if extra > MapMaxThreadSlots {
				return DeviceMap{}, fmt.Errorf("per-thread map: map_extra %d rows, at most %d", extra, MapMaxThreadSlots)
			}
			slots = extra
		}
		return DeviceMap{Type: MapPerThread, MaxEntries: maxEntries, Slots: uint32(slots)}, nil
	case BtMapGPURingbuf:
		if maxEntries == 0 || valueSize == 0 {
			return DeviceMap{}, fmt.Errorf("GPU ring buffer: max_entries %d, value size %d: both must be set", maxEntries, valueSize)
		}
		bytes := uint64(maxEntries) * (8 + uint64(round8(min(valueSize, MaxMapData)))) * BtRingbufThreads
		if bytes > MaxMapData {
			return DeviceMap{}, fmt.Errorf("GPU ring buffer: %d records of %d bytes for %d threads need %d bytes, more than 1 GiB", maxEntries, valueSize, BtRingbufThreads, bytes)
		}
		return DeviceMap{Type: MapRingbuf, MaxEntries: uint32(bytes), PerLane: true}, nil
	}
	return DeviceMap{}, fmt.Errorf("map type %d is not one the device holds (Array, Hash, PerCPUArray, RingBuf, per-thread %d, or bpftime's GPU types)", t, MapTypePerThread)
}

func (t MapType) String() string {
	switch t {
	case MapArray:
		return "array"
	case MapHash:
		return "hash"
	case MapPerWarp:
		return "per-warp"
	case MapRingbuf:
		return "ringbuf"
	case MapPerThread:
		return "per-thread"
	}
	return fmt.Sprintf("maptype(%d)", uint32(t))
}

// Device map layout constants (struct gpuext_dmap).
const (
	MapHdrSize   = dmapHdrSize
	MapWarpSlots = dmapWarpSlots
	// MapNoRowStripes and MapNoRowStripe: a per-thread map counts lookups
	// by threads past its rows in MapNoRowStripes u64s, MapNoRowStripe
	// bytes apart, after the rows (a warp adds to stripe %smid %
	// MapNoRowStripes); the count is their sum (PerThreadNoRow).
	MapNoRowStripes = dmapNoRowStripes
	MapNoRowStripe  = dmapNoRowStripe
	// MapStripesSize is the bytes the stripes take: the last one ends 8
	// bytes into its MapNoRowStripe.
	MapStripesSize = (MapNoRowStripes-1)*MapNoRowStripe + 8
)

// RingStripesOffset is where, in a ring's data, its striped drop counts
// begin: after [u64 head][u64 dropped] and the records' max_entries bytes,
// 8-aligned. The helper library counts a record that does not fit in
// dropped; the translator's inline check of a full ring adds for a warp to
// the stripe of its SM (%smid % MapNoRowStripes, MapNoRowStripe bytes
// apart). RingDropped is the sum.
func RingStripesOffset(maxEntries uint32) uint64 { return 16 + uint64(round8(maxEntries)) }

// RingDropped is the count of records a ring of layout l dropped, from its
// data (after the descriptor): dropped plus the stripes, saturating.
func RingDropped(l MapLayout, data []byte) uint64 {
	if len(data) < 16 {
		return 0
	}
	return addStripes(binary.LittleEndian.Uint64(data[8:]), data, RingStripesOffset(l.MaxEntries))
}

// addStripes adds to n the MapNoRowStripes u64s of data from base, those
// data holds; saturating.
func addStripes(n uint64, data []byte, base uint64) uint64 {
	for i := uint64(0); i < MapNoRowStripes; i++ {
		off := base + i*MapNoRowStripe
		if off+8 > uint64(len(data)) {
			break
		}
		v := binary.LittleEndian.Uint64(data[off:])
		if n+v < n {
			return ^uint64(0)
		}
		n += v
	}
	return n
}

// PerThreadNoRow is the count of lookups past the rows in data, a
// per-thread map's data (after the descriptor) of layout l: the sum of its
// stripes, saturating.
func PerThreadNoRow(l MapLayout, data []byte) uint64 {
	return addStripes(0, data, uint64(l.NBuckets)*uint64(l.MaxEntries)*uint64(l.Stride))
}

func round8(n uint32) uint32 { return (n + 7) &^ 7 }

// MapLayout is the descriptor of one device map: what the translator
// emits at the head of __gpuext_map_<name> and what the host decodes.
type MapLayout struct {
	Type       MapType `json:"type"`
	KeySize    uint32  `json:"keySize"`
	ValueSize  uint32  `json:"valueSize"`
	MaxEntries uint32  `json:"maxEntries"`
	NBuckets   uint32  `json:"nbuckets"` // HASH buckets; PER_WARP slots; else MaxEntries
	Stride     uint32  `json:"stride"`   // bytes per entry/bucket/slot row
	DataSize   uint64  `json:"dataSize"` // bytes after the descriptor
}

// MaxMapData is the most device memory (bytes after the descriptor) one map
// may take.
const MaxMapData = 1 << 30

// Layout computes the device layout of a map (see gpuext_abi.h). Its sizes
// may come from a file a tenant wrote (devrt/probefiles/maps): each is bounded
// before it takes part in arithmetic, so nothing wraps and no loop runs long.
func Layout(t MapType, keySize, valueSize, maxEntries uint32) (MapLayout, error) {
	l := MapLayout{Type: t, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries}
	if t < MapArray || t > MapPerThread {
		return l, fmt.Errorf("map type %d is not a device map type", uint32(t))
	}
	if maxEntries == 0 {
		return l, fmt.Errorf("%s map: max_entries is 0", t)
	}
	// Every map of more entries, or with a larger key or value, needs more
	// than MaxMapData: refused here, before round8 or a product can wrap.
	if maxEntries > MaxMapData || keySize > MaxMapData || valueSize > MaxMapData {
		return l, fmt.Errorf("%s map: key size %d, value size %d, max_entries %d: more than 1 GiB of device memory", t, keySize, valueSize, maxEntries)
	}
	if t != MapRingbuf && valueSize == 0 {
		return l, fmt.Errorf("%s map: value size is 0", t) // the kernel refuses it too
	}
	switch t {
	case MapArray:
		if keySize != 4 {
			return l, fmt.Errorf("array map: key size %d, want 4", keySize)
		}
		l.NBuckets = maxEntries
		l.Stride = 8 + round8(valueSize)
		l.DataSize = uint64(l.Stride) * uint64(maxEntries)
	case MapHash:
		if keySize == 0 {
			return l, fmt.Errorf("hash map: key size is 0") // the kernel refuses it too
		}
		n := uint32(1)
		for n < 2*maxEntries { // 2*maxEntries <= 2^31: n stops at 2^31 at most
			n <<= 1
		}
		l.NBuckets = n
		l.Stride = 8 + round8(keySize) + round8(valueSize)
		// the buckets, then a u64 count of live entries (max_entries at most)
		l.DataSize = uint64(l.Stride)*uint64(n) + 8
	case MapPerWarp:
		if keySize != 4 {
			return l, fmt.Errorf("per-warp map: key size %d, want 4", keySize)
		}
		l.NBuckets = MapWarpSlots
		l.Stride = round8(valueSize)
		row := uint64(l.Stride) * uint64(maxEntries) // < 2^61: times MapWarpSlots could wrap
		if row > MaxMapData/MapWarpSlots {
			return l, fmt.Errorf("per-warp map needs %d bytes in each of %d warp slots, more than 1 GiB", row, MapWarpSlots)
		}
		l.DataSize = row * MapWarpSlots
	case MapRingbuf:
		l.NBuckets = maxEntries
		l.Stride = 1
		l.DataSize = RingStripesOffset(maxEntries) + MapStripesSize
	case MapPerThread:
		return l, fmt.Errorf("per-thread map: use PerThreadLayout (it has a row count)")
	default:
		return l, fmt.Errorf("map type %d is not a device map type", uint32(t))
	}
	if l.DataSize > MaxMapData {
		return l, fmt.Errorf("%s map needs %d bytes of device memory, more than 1 GiB", t, l.DataSize)
	}
	return l, nil
}

// KernelMapLayout is the device layout of a map as the ELF declares it
// (kernel or bpftime map type t, key and value sizes, max_entries,
// map_extra), with what DeviceMapOf says about it. A kernel ring buffer
// keeps its producer at most max_entries-1 bytes ahead of the consumer
// (records are multiples of 8), so it holds max_entries-8 bytes of
// records; the device log gets exactly that capacity, and a full ring
// refuses the same record in both.
func KernelMapLayout(t, keySize, valueSize, maxEntries uint32, extra uint64) (MapLayout, DeviceMap, error) {
	dm, err := DeviceMapOf(t, valueSize, maxEntries, extra)
	if err != nil {
		return MapLayout{}, dm, err
	}
	switch dm.Type {
	case MapPerThread:
		l, err := PerThreadLayout(keySize, valueSize, maxEntries, dm.Slots)
		return l, dm, err
	case MapRingbuf:
		max := dm.MaxEntries
		if !dm.PerLane && max > 8 {
			max = (max - 1) &^ 7
		}
		l, err := Layout(MapRingbuf, 0, 0, max)
		return l, dm, err
	}
	l, err := Layout(dm.Type, keySize, valueSize, dm.MaxEntries)
	return l, dm, err
}

// PerThreadLayout is the layout of a per-thread map of slots rows: row g
// (the launch's linear thread id) holds max_entries values of round8
// bytes; MapNoRowStripes u64s after the rows count lookups by threads past
// the last row.
func PerThreadLayout(keySize, valueSize, maxEntries, slots uint32) (MapLayout, error) {
	l := MapLayout{Type: MapPerThread, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries, NBuckets: slots}
	switch {
	case maxEntries == 0:
		return l, fmt.Errorf("per-thread map: max_entries is 0")
	case valueSize == 0:
		return l, fmt.Errorf("per-thread map: value size is 0")
	case keySize != 4:
		return l, fmt.Errorf("per-thread map: key size %d, want 4", keySize)
	case slots == 0 || slots > MapMaxThreadSlots:
		return l, fmt.Errorf("per-thread map: %d rows, want 1 to %d", slots, MapMaxThreadSlots)
	case maxEntries > MaxMapData || valueSize > MaxMapData:
		return l, fmt.Errorf("per-thread map: value size %d, max_entries %d: more than 1 GiB of device memory", valueSize, maxEntries)
	}
	l.Stride = round8(valueSize)
	row := uint64(l.Stride) * uint64(maxEntries)
	if row > MaxMapData/uint64(slots) {
		return l, fmt.Errorf("per-thread map needs %d bytes in each of %d rows, more than 1 GiB", row, slots)
	}
	l.DataSize = row*uint64(slots) + MapStripesSize
	if l.DataSize > MaxMapData {
		return l, fmt.Errorf("per-thread map needs %d bytes of device memory, more than 1 GiB", l.DataSize)
	}
	return l, nil
}
