package bpf

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestHelperProcess is not a test: the privileged tests re-exec the test
// binary into it (helperCmd) to get separate processes, another cgroup or
// another uid. It does nothing unless GPUEXT_BPF_HELPER is set.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	code := 0
	switch mode {
	case "socket":
		// Creating an inet socket triggers cgroup/sock_create.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "socket:", err)
			code = 1
			break
		}
		unix.Close(fd)
		fmt.Println(os.Getpid())
	case "reserve":
		// Reserve every key of GPUEXT_KEYS in random order; print key=id.
		r, err := OpenRegistry(os.Getenv("GPUEXT_PIN_DIR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
			break
		}
		keys := strings.Split(os.Getenv("GPUEXT_KEYS"), ",")
		rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys {
			id, err := r.Reserve(k, "helper", GpuextTenantConfig{PriorityClass: uint32(PriorityStandard)})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
				break
			}
			fmt.Printf("%s=%d\n", k, id)
		}
		r.Close()
	case "open-pin":
		// Try to reach a pinned map; report how it failed.
		path := os.Getenv("GPUEXT_PIN")
		_, statErr := os.Stat(path)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err == nil {
			m.Close()
		}
		fmt.Printf("stat=%s\nopen=%s\n", errName(statErr), errName(err))
	case "fresh-bpffs":
		code = freshBPFFSHelper()
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		code = 2
	}
	os.Exit(code)
}

func errName(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, unix.EACCES):
		return "EACCES"
	case errors.Is(err, unix.EPERM):
		return "EPERM"
	default:
		return "other:" + err.Error()
	}
}
