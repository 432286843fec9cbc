// Package pcibus parses PCI bus ids, the names the kernel gives devices and
// NVIDIA's driver gives its dmem regions. It imports nothing of gpuext, so
// the config check the thin hooks link can use it.
package pcibus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBad wraps every PCI bus id Normalize refuses.
var ErrBad = errors.New("malformed PCI bus id")

// Normalize returns a PCI bus id the way the kernel names devices
// (and NVIDIA's driver names its dmem regions): lowercase hex, a domain of
// at least four digits, "0000:17:00.0". It accepts NVML's form
// ("00000000:17:00.0", eight domain digits, uppercase) and one without a
// domain ("17:00.0", domain 0).
func Normalize(id string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w %q: %s (want DOMAIN:BUS:DEVICE.FUNCTION in hex, e.g. 0000:17:00.0)", ErrBad, id, why)
	}
	if len(id) > 32 {
		return bad("too long")
	}
	parts := strings.Split(id, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return bad("not two or three ':'-separated fields")
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return bad("no DEVICE.FUNCTION")
	}
	field := func(s string, bits int) (uint64, bool) {
		if s == "" || strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 16, bits)
		return v, err == nil
	}
	dom, ok1 := field(parts[0], 32)
	bus, ok2 := field(parts[1], 8)
	dev, ok3 := field(devFn[0], 5)
	fn, ok4 := field(devFn[1], 3)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return bad("a field is not hex or out of range")
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, dev, fn), nil
}
