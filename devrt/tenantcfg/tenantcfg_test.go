package tenantcfg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Every Settings field survives Encode and Decode: a field added to
// Settings and not to the encoder (and so to the C header) fails here.
func TestRoundTripEveryField(t *testing.T) {
	var s Settings
	v := reflect.ValueOf(&s).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Type() == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(3*time.Millisecond) + int64(i))
		case f.Type() == reflect.TypeOf(Class(0)):
			f.SetUint(uint64(ClassBestEffort))
		case v.Type().Field(i).Name == "SMPercent":
			f.SetUint(40)
		case v.Type().Field(i).Name == "MPSClientPriority":
			f.SetUint(MaxMPSClientPriority)
		case f.Kind() == reflect.Uint32 || f.Kind() == reflect.Uint64:
			f.SetUint(1<<31 + uint64(i))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Type() == reflect.TypeOf(LatencyTarget{}):
			f.Set(reflect.ValueOf(LatencyTarget{RatioMilli: 1500})) // one of the two: both is refused
		case f.Type() == reflect.TypeOf([]uint64(nil)):
			q := make([]uint64, MaxDevices)
			for k := range q {
				q[k] = 1<<33 + uint64(k)
			}
			f.Set(reflect.ValueOf(q))
		default:
			t.Fatalf("Settings.%s: type %s: teach this test and the encoder about it", v.Type().Field(i).Name, f.Type())
		}
	}
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != Size {
		t.Fatalf("encoded %d bytes, the header says %d", len(b), Size)
	}
	got, err := Decode(b)
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", s, got, err)
	}
}

// Decode refuses what the interposer ignores, each with ErrInvalid.
func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(Settings{TenantID: 3, QuotaBytes: 1 << 30, ActiveWindow: DefaultActiveWindow, Class: ClassLatencyCritical})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, b := range map[string][]byte{
		"empty":      {},
		"truncated":  good[:Size-1],
		"too long":   append(append([]byte(nil), good...), 0),
		"magic":      edit(func(b []byte) []byte { b[offMagic] ^= 1; return b }),
		"version":    edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offVersion:], version+1); return b }),
		"size field": edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offSize:], size+8); return b }),
		"class":      edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offPriorityClass:], classMax+1); return b }),
		"smPercent":  edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offSMPercent:], 101); return b }),
		"mpsClientPriority": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[offMPSClientPriority:], mpsPriorityMax+1)
			return b
		}),
		"window 0": edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[offActiveWindowNs:], 0); return b }),
		"both latency targets": edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[offLCTargetP99Us:], 800)
			binary.LittleEndian.PutUint32(b[offLCTargetRatioMilli:], 1500)
			return b
		}),
		"ndevices": edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offNDevices:], maxDevices+1); return b }),
		"config.json": []byte(`{"tenantId": 3, "priorityClass": "latency-critical", "quotaBytes": 1073741824, "x": "` +
			"0123456789" + `"}`),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Decode err = %v, want ErrInvalid", name, err)
		}
	}
	// Reserved bytes and unknown flag bits are where new fields go: a
	// reader ignores them.
	b := edit(func(b []byte) []byte { b[offFlags+3] = 0x80; return b })
	if s, err := Decode(b); err != nil || s.LaunchGate {
		t.Errorf("reserved byte and an unknown flag set: %+v, %v", s, err)
	}
}

// A version 2 file (classes numbered standard 0, latency-critical 1,
// best-effort 2) decodes with today's numbers (gpuext_prio.h); a class
// number above the last is still refused.
func TestDecodeVersion2(t *testing.T) {
	good, err := Encode(Settings{TenantID: 3, QuotaBytes: 1 << 30, ActiveWindow: DefaultActiveWindow, Class: ClassStandard})
	if err != nil {
		t.Fatal(err)
	}
	for v2, want := range map[uint32]Class{0: ClassStandard, 1: ClassLatencyCritical, 2: ClassBestEffort} {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b[offVersion:], versionV2)
		binary.LittleEndian.PutUint32(b[offPriorityClass:], v2)
		s, err := Decode(b)
		if err != nil || s.Class != want || s.TenantID != 3 || s.QuotaBytes != 1<<30 {
			t.Errorf("version 2 class %d: %+v, %v; want class %d", v2, s, err, want)
		}
	}
	b := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(b[offVersion:], versionV2)
	binary.LittleEndian.PutUint32(b[offPriorityClass:], classMax+1)
	if _, err := Decode(b); !errors.Is(err, ErrInvalid) {
		t.Errorf("version 2 class %d: err = %v, want ErrInvalid", classMax+1, err)
	}
	if version == versionV2 {
		t.Fatalf("version %d is the old one", version)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for name, s := range map[string]Settings{
		"no window":         {Class: ClassLatencyCritical},
		"class":             {Class: classMax + 1, ActiveWindow: time.Millisecond},
		"smPercent":         {Class: ClassBestEffort, SMPercent: 101, ActiveWindow: time.Millisecond},
		"mpsClientPriority": {Class: ClassBestEffort, MPSClientPriority: 2, ActiveWindow: time.Millisecond},
		"devices":           {ActiveWindow: time.Millisecond, DeviceQuotas: make([]uint64, MaxDevices+1)},
	} {
		if _, err := Encode(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Encode err = %v, want ErrInvalid", name, err)
		}
	}
}

// TestDocsGiveTheSize: the docs that describe settings.bin give the size
// the header defines (docs/injection.md once said 64 bytes after the
// record had grown to 200).
func TestDocsGiveTheSize(t *testing.T) {
	for doc, want := range map[string]string{
		"injection.md": fmt.Sprintf("one %d-byte `struct gpuext_devrt_tenant`", size),
		"devrt.md":     fmt.Sprintf("`$GPUEXT_TENANT_DIR/settings.bin`, %d bytes", size),
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("docs/%s does not say %q: settings.bin is %d bytes (GPUEXT_DEVRT_TENANT_SIZE)", doc, want, size)
		}
	}
}
