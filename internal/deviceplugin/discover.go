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

	"github.com/gpuext/gpuext/internal/strictjson"

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
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--gpus", "--json")
	var stderr bytes.Buffer
	cmd.Stderr = &limited{w: &stderr, n: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrDiscover, err)
	}
	if err := cmd.Start(); err != nil {
		return s, fmt.Errorf("%w: %s: %w", ErrDiscover, bin, err)
	}
	data, rerr := io.ReadAll(io.LimitReader(out, MaxGpuviewOutput+1))
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return s, fmt.Errorf("%w: %s: %w: %s", ErrDiscover, bin, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if rerr != nil {
		return s, fmt.Errorf("%w: %s: %w", ErrDiscover, bin, rerr)
	}
	return withDiscovered(s, data)
}

// withDiscovered takes gpuext-gpuview's JSON: indices 0..n-1 in order, at
// most pools.MaxGPUs, each at least one unit.
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
		s.GPUs = append(s.GPUs, pools.GPU{Index: i, UUID: g.UUID, Memory: g.MemoryBytes})
	}
	return s, s.CheckDevices()
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

// limited writes at most n bytes to w and drops the rest.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
