package deviceplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/lib/strictjson"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

// The agent is a static binary (CGO_ENABLED=0) and go-nvml needs cgo, so the
// agent does not load NVML itself: it runs gpuext-gpuview --gpus --json, the
// one gpuext binary built with cgo, once at start-up. A node whose config
// lists its GPUs never runs it.

// MaxGpuviewOutput bounds what the agent reads from gpuext-gpuview.
const MaxGpuviewOutput = 64 << 10

// ErrDiscover wraps the errors of Discover.
var ErrDiscover = errors.New("gpu discovery (gpuext-gpuview --gpus)")

// gpuviewGPU is one element of gpuext-gpuview --gpus --json.
type gpuviewGPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	MemoryBytes uint64 `json:"memoryBytes"`
	PCIBusID    string `json:"pciBusId,omitempty"`
}

// Discover fills s.GPUs from NVML through gpuext-gpuview when the config
// listed none (s.Gpuview, else gpuext-gpuview beside the running binary,
// else on PATH). A spec that lists GPUs is returned as it is.
func Discover(ctx context.Context, s pools.Spec) (pools.Spec, error) {
	if len(s.GPUs) > 0 {
		return s, nil
	}
	bin, err := GpuviewPath(s.Gpuview)
	if err != nil {
		return s, fmt.Errorf("%w: no GPUs in devicePlugin.gpus and %w", ErrDiscover, err)
	}
	data, err := RunGpuview(ctx, bin, 30*time.Second, MaxGpuviewOutput, "--gpus", "--json")
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrDiscover, err)
	}
	return withDiscovered(s, data)
}

// withDiscovered takes gpuext-gpuview's JSON: indices 0..n-1 in order, at
// most pools.MaxGPUs, each at least one unit, each with a UUID when the
// CDI names are UUIDs.
func withDiscovered(s pools.Spec, data []byte) (pools.Spec, error) {
	if len(data) > MaxGpuviewOutput {
		return s, fmt.Errorf("%w: more than %d bytes", ErrDiscover, MaxGpuviewOutput)
	}
	var gpus []gpuviewGPU
	if err := strictjson.Decode(data, &gpus); err != nil {
		return s, fmt.Errorf("%w: %w", ErrDiscover, err)
	}
	if len(gpus) == 0 {
		return s, fmt.Errorf("%w: NVML lists no GPU", ErrDiscover)
	}
	if len(gpus) > pools.MaxGPUs {
		return s, fmt.Errorf("%w: %d GPUs, at most %d", ErrDiscover, len(gpus), pools.MaxGPUs)
	}
	s.GPUs = nil
	for i, g := range gpus {
		if g.Index != i {
			return s, fmt.Errorf("%w: GPU %d has index %d", ErrDiscover, i, g.Index)
		}
		if g.UUID != "" && !pools.ValidUUID(g.UUID) {
			return s, fmt.Errorf("%w: GPU %d: uuid %q", ErrDiscover, i, g.UUID)
		}
		if g.MemoryBytes < s.Unit {
			return s, fmt.Errorf("%w: GPU %d: %d bytes, less than one unit", ErrDiscover, i, g.MemoryBytes)
		}
		if g.PCIBusID != "" {
			if _, err := cgroup.NormalizePCIBusID(g.PCIBusID); err != nil {
				return s, fmt.Errorf("%w: GPU %d: %w", ErrDiscover, i, err)
			}
		}
		s.GPUs = append(s.GPUs, pools.GPU{Index: i, UUID: g.UUID, Memory: g.MemoryBytes, PCIBusID: g.PCIBusID})
	}
	if err := s.CheckDevices(); err != nil {
		return s, err
	}
	// cdi.deviceNameStrategy "uuid" on GPUs NVML reported without one
	return s, s.CheckCDI()
}

// GpuviewPath is the gpuext-gpuview binary to run: configured (the config's
// devicePlugin.gpuview) when set, else gpuext-gpuview beside the running
// binary, else on PATH. Discover and the metrics' NVML series use it.
func GpuviewPath(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "gpuext-gpuview")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("gpuext-gpuview")
	if err != nil {
		return "", fmt.Errorf("no gpuext-gpuview beside the agent or on PATH: %w", err)
	}
	return p, nil
}

// RunGpuview runs bin (GpuviewPath) with args for at most timeout and
// returns its stdout: an error when it exits non-zero (with the start of
// its stderr), times out or prints more than max bytes. Discover and the
// metrics' NVML series run gpuext-gpuview through it.
func RunGpuview(ctx context.Context, bin string, timeout time.Duration, max int, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = time.Second // a child that keeps the pipes open does not hold the caller
	var stdout, stderr bytes.Buffer
	over := &capped{w: &stdout, n: max}
	cmd.Stdout, cmd.Stderr = over, &capped{w: &stderr, n: 1024}
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: no answer within %s", bin, timeout)
	case err != nil:
		return nil, fmt.Errorf("%s: %w: %s", bin, err, bytes.TrimSpace(stderr.Bytes()))
	case over.over:
		return nil, fmt.Errorf("%s: more than %d bytes of output", bin, max)
	}
	return stdout.Bytes(), nil
}

// capped writes at most n bytes to w, drops the rest and notes it.
type capped struct {
	w    io.Writer
	n    int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	k := min(len(p), c.n)
	_, _ = c.w.Write(p[:k])
	c.n -= k
	if k < len(p) {
		c.over = true
	}
	return len(p), nil
}
