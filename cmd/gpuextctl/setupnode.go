package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
)

// DefaultDevrtSource is where the agent's image holds the device runtime
// (deploy/image: ImageDevrtPath); setup-node copies it to the host.
const DefaultDevrtSource = "/usr/lib/gpuext/devrt/" + admission.DevrtLibrary

// maxDevrtSize bounds the library setup-node reads (it is ~100 KiB).
const maxDevrtSize = 64 << 20

// setupNode prepares a node for the agent, as the chart's init container
// does: a bpf filesystem under pinDir (mounted when the node has none) and
// the device runtime in devrtDir, replaced by rename so that processes
// running the old library keep it.
func setupNode(cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("setup-node", flag.ContinueOnError)
	src := fs.String("devrt-src", DefaultDevrtSource, "the device runtime library to install in the config's devrtDir")
	pinDir := fs.String("pin-dir", cfg.PinDir, "registry pin directory: a bpf filesystem is mounted for it when missing")
	devrtDir := fs.String("devrt-dir", cfg.DevrtDir, "host directory of the device runtime (mounted read-only into tenant containers)")
	inContainer := fs.Bool("in-container", false, "running in a container with the host's paths bind-mounted: refuse to mount a bpf filesystem that the host would not see (the mount point's mount is not shared)")
	mountinfo := fs.String("mountinfo", "/proc/self/mountinfo", "mount table read for --in-container")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("setup-node: unexpected argument %q", fs.Arg(0))
	}
	if err := setupBPFFS(*pinDir, *inContainer, *mountinfo, out); err != nil {
		return err
	}
	return installDevrt(*src, *devrtDir, out)
}

// bpffsMountPoint is where bpf.EnsureBPFFS mounts a bpf filesystem for dir.
func setupBPFFS(pinDir string, inContainer bool, mountinfo string, out io.Writer) error {
	target := bpf.BPFFSMountPoint(pinDir)
	if bpf.OnBPFFS(target) {
		fmt.Fprintf(out, "bpffs: %s is a bpf filesystem (pinDir %s)\n", target, pinDir)
		return nil
	}
	if inContainer {
		data, err := readBounded(mountinfo, 4<<20)
		if err != nil {
			return fmt.Errorf("bpffs: --in-container: %w", err)
		}
		mp, shared := mountOf(data, target)
		if !shared {
			return fmt.Errorf("bpffs: no bpf filesystem at %s, and the mount holding it (%s) is not shared with the host: "+
				"one mounted here would stay in this container, and the registry's pins with it. Mount bpffs on the node "+
				"(mount -t bpf bpf %s), or give this container the host's %s with mountPropagation: Bidirectional "+
				"(chart value bpffs.mountPropagation)", target, mp, target, target)
		}
	}
	mp, err := bpf.EnsureBPFFS(pinDir)
	if err != nil {
		return fmt.Errorf("bpffs: %w", err)
	}
	if mp == "" { // another process mounted it meanwhile
		fmt.Fprintf(out, "bpffs: %s is a bpf filesystem (pinDir %s)\n", target, pinDir)
		return nil
	}
	fmt.Fprintf(out, "bpffs: no bpf filesystem was mounted: mounted one at %s (pinDir %s)\n", mp, pinDir)
	return nil
}

// mountOf finds the mount holding path in a mountinfo table (the longest
// mount point that is path or a parent of it) and reports whether it is
// shared (propagates mounts to its peers, such as the host's mount).
func mountOf(mountinfo []byte, path string) (mountPoint string, shared bool) {
	path = filepath.Clean(path)
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:2 - ext3 /dev/root rw
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp != path && mp != "/" && !strings.HasPrefix(path, mp+"/") {
			continue
		}
		if len(mp) < len(mountPoint) {
			continue
		}
		// later lines with the same mount point are mounted over earlier ones
		mountPoint, shared = mp, false
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				shared = true
			}
		}
	}
	return mountPoint, shared
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// installDevrt copies the library to dir/libgpuext-devrt.so: unchanged when
// the bytes are the same, else written beside it and renamed over it (a
// process that loaded the old file keeps its inode; truncating it in place
// would crash every tenant process that maps it).
func installDevrt(src, dir string, out io.Writer) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("devrt: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("devrt: %s is not a regular file", src)
	}
	data, err := readBounded(src, maxDevrtSize)
	if err != nil {
		return fmt.Errorf("devrt: %w", err)
	}
	if !bytes.HasPrefix(data, []byte("\x7fELF")) {
		return fmt.Errorf("devrt: %s is not an ELF shared library", src)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(data))
	dst := filepath.Join(dir, admission.DevrtLibrary)
	if old, err := readBounded(dst, maxDevrtSize); err == nil && bytes.Equal(old, data) {
		fmt.Fprintf(out, "devrt: %s is up to date (%d bytes, sha256 %s)\n", dst, len(data), sum)
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("devrt: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+admission.DevrtLibrary+".*")
	if err != nil {
		return fmt.Errorf("devrt: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("devrt: install %s: %w", dst, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() //nolint:errcheck // the rename is done; this only hastens it to disk
		d.Close()
	}
	fmt.Fprintf(out, "devrt: installed %s (%d bytes, sha256 %s)\n", dst, len(data), sum)
	return nil
}

// ping asks the agent's API socket for an answer, for a liveness or
// readiness probe: the agent serves it once it is configured (after it
// registered with containerd's NRI, or at start with --nri=false). Any
// HTTP answer counts: the socket is the agent's, root only.
func ping(cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ping", flag.ContinueOnError)
	socket := fs.String("socket", cfg.AgentSocket, "the agent's API socket")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	client := &http.Client{
		Timeout: *timeout,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", *socket)
		}},
	}
	defer client.CloseIdleConnections()
	// a GET of the admit route: the agent's router answers 405 without
	// running an admission
	resp, err := client.Get("http://gpuext-agent/v1/admit")
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("the gpuext agent at %s: no answer in %s (busy or stuck: its log says; --timeout waits longer)", *socket, *timeout)
		}
		return agentDown(*socket, err)
	}
	resp.Body.Close()
	fmt.Fprintf(out, "agent at %s answers\n", *socket)
	return nil
}
