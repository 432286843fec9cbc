package admission

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
)

// acctDir is the tenant's writable accounting directory (the device
// runtime's shared usage file). It is separate from the read-only tenant
// directory, so a tenant can write its usage but not its limits.
func (c *Core) acctDir(id bpf.TenantID) string { return AcctDir(c.cfg.StateDir, uint64(id)) }

// The state directory's layout: tenants/<id> (TenantDir: config.json and
// the compiled probes), acct/<id> (AcctDir: usage and probe output), board.
const (
	stateTenants = "tenants"
	stateAcct    = "acct"
)

// TenantDir is tenant id's directory under stateDir.
func TenantDir(stateDir string, id uint64) string {
	return filepath.Join(stateDir, stateTenants, strconv.FormatUint(id, 10))
}

// AcctDir is tenant id's accounting directory under stateDir.
func AcctDir(stateDir string, id uint64) string {
	return filepath.Join(stateDir, stateAcct, strconv.FormatUint(id, 10))
}

// TenantsRoot is the directory of all tenant directories under stateDir.
func TenantsRoot(stateDir string) string { return filepath.Join(stateDir, stateTenants) }

// boardDir holds the host-published, read-only priority board.
func (c *Core) boardDir() string { return filepath.Join(c.cfg.StateDir, "board") }

// makeAcctDir creates tenant id's accounting directory. The directory of
// all of them is root-only (0700): host users reach no tenant's usage or
// probe output, while each tenant's containers reach their own through the
// bind mount, whose source the runtime resolves as root.
func (c *Core) makeAcctDir(id bpf.TenantID) (string, error) {
	root := filepath.Join(c.cfg.StateDir, stateAcct)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("tenant accounting root: %w", err)
	}
	if err := os.Chmod(root, 0o700); err != nil { // a state dir made by an older version: 0755
		return "", fmt.Errorf("tenant accounting root: %w", err)
	}
	dir := c.acctDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("tenant accounting dir: %w", err)
		}
	} else if err != nil {
		return dir, nil // exists: mode already set
	}
	// Any user of the container may run CUDA processes: world-writable,
	// sticky, and private to the tenant because only its containers mount it.
	if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
		return "", fmt.Errorf("tenant accounting dir: %w", err)
	}
	return dir, nil
}

func (c *Core) tenantDir(id bpf.TenantID) string { return TenantDir(c.cfg.StateDir, uint64(id)) }

// stateLockFile serialises admissions against the collection of tenant
// directories, across every process that writes the state directory.
const stateLockFile = ".lock"

// lockState takes the state directory's lock: shared for an admission
// (reserve a tenant, then write its directories), exclusive for the
// collection (snapshot the registry, then remove directories of tenants not
// in it), so the collection never removes a directory admitted after its
// snapshot. The lock is an flock of its own open file description: it
// serialises goroutines of one process too.
func (c *Core) lockState(exclusive bool) (func(), error) {
	// New made the state dir (it holds the board dir).
	f, err := os.OpenFile(filepath.Join(c.cfg.StateDir, stateLockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// gcTenantDirs removes tenant directories whose tenant is gone.
func (c *Core) gcTenantDirs() {
	unlock, err := c.lockState(true)
	if err != nil {
		c.log.WithError(err).Warn("tenant directories not collected")
		return
	}
	defer unlock()
	tenants, err := c.reg.List()
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, t := range tenants {
		live[strconv.FormatUint(uint64(t.ID), 10)] = true
	}
	for _, sub := range []string{stateTenants, stateAcct} {
		root := filepath.Join(c.cfg.StateDir, sub)
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if !live[e.Name()] {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
}
