package tenantcfg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// FileName is the settings file's name in the tenant directory.
const FileName = fileName

// Size is the settings file's exact size in bytes.
const Size = size

// DefaultActiveWindow is the latency-critical pending window of a policy
// that names none (and the interposer's own when it has no settings file).
const DefaultActiveWindow = time.Duration(defaultWindowNs)

// Class is a GPUEXT_DEVRT_CLASS_* value: the device runtime's priority class.
type Class uint32

// The device runtime's priority classes.
const (
	ClassStandard        Class = classStandard
	ClassLatencyCritical Class = classLatencyCritical
	ClassBestEffort      Class = classBestEffort
)

// ErrInvalid is wrapped by Decode and Encode for a record the interposer
// would ignore.
var ErrInvalid = errors.New("invalid tenant settings")

// Settings is struct gpuext_devrt_tenant without its header: everything
// the interposer takes from the host about its tenant. Every default is
// resolved by the writer; the interposer takes each value as it is.
type Settings struct {
	TenantID   uint64 // the host's tenant id
	QuotaBytes uint64 // device memory over all the tenant's processes; 0: no quota
	// ActiveWindow: for a latency-critical tenant, how long after a launch
	// its work counts as pending (the launch gate). Positive.
	ActiveWindow time.Duration
	Class        Class
	SMPercent    uint32 // best-effort under MPS: share of the SMs on each GPU, 1..100; 0: not confined
	// MPSClientPriority: best-effort under MPS, CUDA_MPS_CLIENT_PRIORITY of
	// its contexts (0 normal, MPS's default; 1 below normal). At most
	// MaxMPSClientPriority.
	MPSClientPriority uint32
	// LaunchGate: a best-effort tenant's launches wait while the board says
	// latency-critical work is pending (not under an MPS share, which is the
	// isolation then). Off unless the policy asks for it.
	LaunchGate bool
	// DeviceQuotas, when not empty, is the quota of each device ordinal
	// the process sees (0: none on that ordinal); ordinals past the list
	// have no memory. Empty: QuotaBytes applies on every device, each on
	// its own. At most MaxDevices.
	DeviceQuotas []uint64
	// LatencyTarget: a latency-critical tenant's target (the policy's
	// latencyTarget), read by the host's latency controller only. Zero:
	// none.
	LatencyTarget LatencyTarget
	// HostGPUs: the host GPUs the tenant was given, bit i for host GPU
	// index i (< 32), for a container given GPU memory by the device
	// plugin; 0: not known (every GPU). The latency controller scopes its
	// pacing by them.
	HostGPUs uint32
}

// LatencyTarget is a bound on a latency-critical tenant's request p99:
// P99 (absolute) or Ratio times the tenant's own p99 with no best-effort
// process beside it (relative, in thousandths). At most one is set; both
// zero: no target.
type LatencyTarget struct {
	P99        time.Duration // microsecond resolution
	RatioMilli uint32        // 1500: 1.5x
}

// IsZero is whether there is no target.
func (t LatencyTarget) IsZero() bool { return t.P99 <= 0 && t.RatioMilli == 0 }

// String is the policy's form: "1.5x" or "800us".
func (t LatencyTarget) String() string {
	switch {
	case t.RatioMilli > 0:
		return strconv.FormatFloat(float64(t.RatioMilli)/1000, 'f', -1, 64) + "x"
	case t.P99 > 0:
		return t.P99.String()
	}
	return ""
}

// MaxMPSClientPriority is the lowest MPS client priority (CUDA's
// CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal).
const MaxMPSClientPriority = mpsPriorityMax

// MaxDevices is the most device ordinals Settings.DeviceQuotas holds.
const MaxDevices = maxDevices

// Validate makes the interposer's range checks.
func (s Settings) Validate() error {
	switch {
	case s.Class > classMax:
		return fmt.Errorf("%w: class %d", ErrInvalid, s.Class)
	case s.SMPercent > 100:
		return fmt.Errorf("%w: smPercent %d above 100", ErrInvalid, s.SMPercent)
	case s.MPSClientPriority > mpsPriorityMax:
		return fmt.Errorf("%w: mpsClientPriority %d above %d", ErrInvalid, s.MPSClientPriority, mpsPriorityMax)
	case s.ActiveWindow <= 0:
		return fmt.Errorf("%w: active window %v, want > 0", ErrInvalid, s.ActiveWindow)
	case s.LatencyTarget.P99 > 0 && s.LatencyTarget.RatioMilli > 0:
		return fmt.Errorf("%w: latency target both absolute (%v) and relative (%d/1000)", ErrInvalid, s.LatencyTarget.P99, s.LatencyTarget.RatioMilli)
	case s.LatencyTarget.P99 > time.Duration(math.MaxUint32)*time.Microsecond:
		return fmt.Errorf("%w: latency target %v above %d us", ErrInvalid, s.LatencyTarget.P99, uint32(math.MaxUint32))
	case len(s.DeviceQuotas) > maxDevices:
		return fmt.Errorf("%w: %d device quotas, at most %d", ErrInvalid, len(s.DeviceQuotas), maxDevices)
	}
	return nil
}

// put stores v in the field at off of the given width (from the layout).
func put(b []byte, off, width int, v uint64) {
	switch width {
	case 4:
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b[off:], v)
	default:
		panic(fmt.Sprintf("tenantcfg: field of %d bytes at %d", width, off)) // a layout change the encoder does not know
	}
}

func get(b []byte, off, width int) uint64 {
	switch width {
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[off:]))
	case 8:
		return binary.LittleEndian.Uint64(b[off:])
	}
	panic(fmt.Sprintf("tenantcfg: field of %d bytes at %d", width, off))
}

// Encode returns the settings file's bytes.
func Encode(s Settings) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	put(b, offMagic, sizeMagic, magic)
	put(b, offVersion, sizeVersion, version)
	put(b, offSize, sizeSize, size)
	put(b, offTenantID, sizeTenantID, s.TenantID)
	put(b, offQuotaBytes, sizeQuotaBytes, s.QuotaBytes)
	put(b, offActiveWindowNs, sizeActiveWindowNs, uint64(s.ActiveWindow.Nanoseconds()))
	put(b, offPriorityClass, sizePriorityClass, uint64(s.Class))
	put(b, offSMPercent, sizeSMPercent, uint64(s.SMPercent))
	put(b, offMPSClientPriority, sizeMPSClientPriority, uint64(s.MPSClientPriority))
	if s.LaunchGate {
		put(b, offFlags, sizeFlags, flagLaunchGate)
	}
	put(b, offLCTargetP99Us, sizeLCTargetP99Us, uint64(s.LatencyTarget.P99.Microseconds()))
	put(b, offLCTargetRatioMilli, sizeLCTargetRatioMilli, uint64(s.LatencyTarget.RatioMilli))
	put(b, offNDevices, sizeNDevices, uint64(len(s.DeviceQuotas)))
	put(b, offHostGPUs, sizeHostGPUs, uint64(s.HostGPUs))
	for i, q := range s.DeviceQuotas {
		put(b, offDeviceQuotaBytes+i*sizeDeviceQuotaBytes, sizeDeviceQuotaBytes, q)
	}
	return b, nil
}

// Decode reads a settings file the way the interposer does: exactly Size
// bytes, magic, version and size as the header says, values in range.
// Reserved bytes and unknown flag bits are ignored (new fields take them).
func Decode(b []byte) (Settings, error) {
	if len(b) != size {
		return Settings{}, fmt.Errorf("%w: %d bytes, want %d", ErrInvalid, len(b), size)
	}
	if m := get(b, offMagic, sizeMagic); m != magic {
		return Settings{}, fmt.Errorf("%w: magic %#x", ErrInvalid, m)
	}
	v := get(b, offVersion, sizeVersion)
	if v != version && v != versionV2 {
		return Settings{}, fmt.Errorf("%w: version %d, want %d", ErrInvalid, v, version)
	}
	if n := get(b, offSize, sizeSize); n != size {
		return Settings{}, fmt.Errorf("%w: size field %d, want %d", ErrInvalid, n, size)
	}
	w := get(b, offActiveWindowNs, sizeActiveWindowNs)
	if w > math.MaxInt64 { // what a time.Duration holds; the interposer takes any u64
		return Settings{}, fmt.Errorf("%w: active window %d ns", ErrInvalid, w)
	}
	s := Settings{
		TenantID:     get(b, offTenantID, sizeTenantID),
		QuotaBytes:   get(b, offQuotaBytes, sizeQuotaBytes),
		ActiveWindow: time.Duration(w),
		Class:        Class(get(b, offPriorityClass, sizePriorityClass)),
		SMPercent:    uint32(get(b, offSMPercent, sizeSMPercent)),
		// a value above uint32 cannot be: the field is 4 bytes
		MPSClientPriority: uint32(get(b, offMPSClientPriority, sizeMPSClientPriority)),
		LaunchGate:        get(b, offFlags, sizeFlags)&flagLaunchGate != 0,
		LatencyTarget: LatencyTarget{P99: time.Duration(get(b, offLCTargetP99Us, sizeLCTargetP99Us)) * time.Microsecond,
			RatioMilli: uint32(get(b, offLCTargetRatioMilli, sizeLCTargetRatioMilli))},
		HostGPUs: uint32(get(b, offHostGPUs, sizeHostGPUs)),
	}
	n := get(b, offNDevices, sizeNDevices)
	if n > maxDevices {
		return Settings{}, fmt.Errorf("%w: ndevices %d, at most %d", ErrInvalid, n, maxDevices)
	}
	for i := 0; i < int(n); i++ {
		s.DeviceQuotas = append(s.DeviceQuotas, get(b, offDeviceQuotaBytes+i*sizeDeviceQuotaBytes, sizeDeviceQuotaBytes))
	}
	if v == versionV2 && s.Class <= classMax {
		s.Class = classFromV2(s.Class)
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// classFromV2 is a version 2 file's class (standard 0, latency-critical 1,
// best-effort 2) in today's numbering (gpuext_prio.h), as the interposer
// translates it (gpuext_devrt_class_from_v2).
func classFromV2(c Class) Class {
	switch c {
	case classV2LatencyCritical:
		return ClassLatencyCritical
	case classV2BestEffort:
		return ClassBestEffort
	}
	return ClassStandard
}
