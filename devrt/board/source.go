package board

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// HostTenant is what the host's own state says about a tenant's priority.
type HostTenant struct {
	Class tenantcfg.Class
	// Window: for a latency-critical tenant, how long after a launch its
	// work counts as pending; a deadline it writes is clamped to now + Window.
	Window time.Duration
	// Target: a latency-critical tenant's latency target (zero: none).
	Target tenantcfg.LatencyTarget
	// SMPercent: a best-effort tenant's MPS share in its policy, the most
	// the latency controller may give its contexts (0: not confined).
	SMPercent uint32
	// Gen tells one tenant under an id from a later one that reuses it:
	// the settings file's inode (admission replaces the file only when its
	// bytes change). 0: unknown.
	Gen uint64
	// HostGPUs: the host GPUs the tenant was given (bit per index); 0: not
	// known (every GPU).
	HostGPUs uint32
}

// Source is the host's view of its tenants, by tenant id (the name of the
// tenant's directory under the acct root). It must come from state that
// tenants cannot write.
type Source interface {
	Tenants() (map[bpf.TenantID]HostTenant, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func() (map[bpf.TenantID]HostTenant, error)

// Tenants calls f.
func (f SourceFunc) Tenants() (map[bpf.TenantID]HostTenant, error) { return f() }

// TenantSettings is the Source of a state dir's tenant dirs
// (<stateDir>/tenants, admission.TenantsRoot): each tenant's settings.bin,
// what the device runtime itself reads, written by admission as root and
// mounted read-only into the tenant. A file is read again only when it
// changed (inode, size, mtime); a tenant dir without a valid one is left out.
func TenantSettings(tenantsRoot string) Source {
	return &settingsDirs{root: tenantsRoot, cache: map[bpf.TenantID]cachedSettings{}}
}

type settingsDirs struct {
	root  string
	cache map[bpf.TenantID]cachedSettings
}

type cachedSettings struct {
	ino   uint64
	size  int64
	mtime time.Time
	host  HostTenant
	ok    bool
}

func (s *settingsDirs) Tenants() (map[bpf.TenantID]HostTenant, error) {
	ents, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		clear(s.cache)
		return map[bpf.TenantID]HostTenant{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tenant dirs: %w", err)
	}
	out := make(map[bpf.TenantID]HostTenant, len(ents))
	seen := make(map[bpf.TenantID]bool, len(ents))
	for _, e := range ents {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		id := bpf.TenantID(n)
		seen[id] = true
		path := filepath.Join(s.root, e.Name(), tenantcfg.FileName)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			delete(s.cache, id)
			continue
		}
		c, hit := s.cache[id]
		ino := inode(fi)
		if !hit || c.ino != ino || c.size != fi.Size() || !c.mtime.Equal(fi.ModTime()) {
			c = cachedSettings{ino: ino, size: fi.Size(), mtime: fi.ModTime()}
			if b, err := os.ReadFile(path); err == nil {
				if st, err := tenantcfg.Decode(b); err == nil {
					c.host, c.ok = HostTenant{Class: st.Class, Window: st.ActiveWindow, Target: st.LatencyTarget, SMPercent: st.SMPercent, Gen: ino, HostGPUs: st.HostGPUs}, true
				}
			}
			s.cache[id] = c
		}
		if c.ok {
			out[id] = c.host
		}
	}
	for id := range s.cache {
		if !seen[id] {
			delete(s.cache, id)
		}
	}
	return out, nil
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
