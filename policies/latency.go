package policies

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bounds of a latency target (priority.latencyTarget).
const (
	MinLatencyRatio = 1.05  // a relative target below this cannot be told from noise
	MaxLatencyRatio = 100.0 // beyond it the target holds nothing
	MinLatencyP99   = 10 * time.Microsecond
	MaxLatencyP99   = 10 * time.Second // what the device runtime's settings hold, with room
)

// ParseLatencyTarget reads a latency target: "<ratio>x" (relative to the
// tenant's own p99 with no best-effort process on the node; in
// thousandths) or a Go duration (absolute p99). Exactly one of the two
// results is non-zero; the error names what is wrong with s.
func ParseLatencyTarget(s string) (ratioMilli uint32, p99 time.Duration, err error) {
	if r, ok := strings.CutSuffix(s, "x"); ok {
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || math.IsNaN(v) {
			return 0, 0, fmt.Errorf("%q: want a ratio such as \"1.5x\" or a duration such as \"800us\"", s)
		}
		if v < MinLatencyRatio || v > MaxLatencyRatio {
			return 0, 0, fmt.Errorf("%q: ratio out of range %gx..%gx (relative to the tenant's own p99 alone)", s, MinLatencyRatio, MaxLatencyRatio)
		}
		return uint32(math.Round(v * 1000)), 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, 0, fmt.Errorf("%q: want a ratio such as \"1.5x\" or a duration such as \"800us\"", s)
	}
	if d < MinLatencyP99 || d > MaxLatencyP99 {
		return 0, 0, fmt.Errorf("%q: out of range %v..%v", s, MinLatencyP99, MaxLatencyP99)
	}
	return 0, d.Truncate(time.Microsecond), nil
}
