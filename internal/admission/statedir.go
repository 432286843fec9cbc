package admission

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/lib/atomicfile"
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

// AcctDirBytes bounds what the processes of one tenant can write into its
// accounting directory: it is a tmpfs of its own, so a tenant that fills it
// gets ENOSPC in its own directory while the state directory (and the
// host's /run it usually sits on), the agent and every other tenant keep
// working. Its pages are charged to the memory cgroup of the process that
// writes them: a tenant spends its own memory limit. The probe output the
// agent reads of a tenant is bounded at 64 MiB (metrics.ProbeBytesPerTenant);
// the usage file and the wake FIFO take a few pages.
const AcctDirBytes = 80 << 20

// acctDirInodes bounds the number of files in one accounting directory.
const acctDirInodes = 4096

// stateAcctOwner holds, per accounting directory, the creation time of the
// tenant it was made for (the registry's CreatedNs). A directory whose
// stamp is not the current tenant's is the previous holder's of a reused
// id, or one whose making was cut short: it is replaced, never reused.
const stateAcctOwner = "acct.owner"

// acctLockFile serialises the making of accounting directories (admissions
// of one pod tenant run concurrently under the shared state lock).
const acctLockFile = ".acct.lock"

// makeAcctDir returns tenant id's accounting directory for the tenant
// created at created: a fresh tmpfs of AcctDirBytes, mode 1777, unless the
// one there was made for this very tenant (a second container of a pod
// tenant, a re-admission). A directory left by an earlier tenant of the
// same id, or with no stamp (an agent killed while making it, or before it
// collected it), is unmounted and removed first, so a new tenant never sees
// a byte another tenant wrote. The directory of all of them is root-only
// (0700): host users reach no tenant's usage or probe output, while each
// tenant's containers reach their own through the bind mount, whose source
// the runtime resolves as root.
func (c *Core) makeAcctDir(id bpf.TenantID, created time.Time) (string, error) {
	root := filepath.Join(c.cfg.StateDir, stateAcct)
	owners := filepath.Join(c.cfg.StateDir, stateAcctOwner)
	for _, d := range []string{root, owners} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", fmt.Errorf("tenant accounting root: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil { // a state dir made by an older version: 0755
			return "", fmt.Errorf("tenant accounting root: %w", err)
		}
	}
	unlock, err := c.lockFile(acctLockFile, true)
	if err != nil {
		return "", err
	}
	defer unlock()
	dir := c.acctDir(id)
	stampPath := filepath.Join(owners, strconv.FormatUint(uint64(id), 10))
	stamp := strconv.FormatInt(created.UnixNano(), 10)
	if have, err := os.ReadFile(stampPath); err == nil && string(have) == stamp {
		// the stamp is written last: the dir is whole (a tmpfs, or the
		// plain dir of a node the mount does not reach)
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
			return dir, nil
		}
	}
	// Not this tenant's: the stamp goes first, so a kill from here on
	// leaves a directory without one, which the next admission replaces.
	if err := os.Remove(stampPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("tenant accounting dir: %w", err)
	}
	if err := removeAcctDir(dir); err != nil {
		return "", fmt.Errorf("tenant accounting dir of a previous tenant %d: %w", id, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("tenant accounting dir: %w", err)
	}
	// Any user of the container may run CUDA processes: world-writable,
	// sticky, and private to the tenant because only its containers mount it.
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", AcctDirBytes, acctDirInodes)
	if err := unix.Mount("gpuext-acct", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("tenant accounting dir %s: mount a tmpfs of %d bytes: %w", dir, AcctDirBytes, err)
	}
	if !c.reachesNode(dir) {
		// The node's runtime would bind the empty dir below the mount: a
		// plain dir is what the tenant and the agent can share here.
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		c.unboundedAcct.Do(func() {
			c.log.WithFields(logrus.Fields{"stateDir": c.cfg.StateDir, "acctDir": dir}).
				Warn("tenant acct dirs are NOT bounded: a tmpfs the agent mounts under the state dir does not reach the node " +
					"(an agent container whose state dir has no Bidirectional mount propagation); plain directories are used")
		})
		if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
			return "", fmt.Errorf("tenant accounting dir: %w", err)
		}
	}
	if err := atomicfile.Write(stampPath, []byte(stamp), 0o600); err != nil {
		return "", fmt.Errorf("tenant accounting dir: %w", err)
	}
	return dir, nil
}

// reachesNode says whether dir, just mounted, is what the node's runtime
// sees at that path: the same file in the mount namespace of the host's
// init (HostRoot/proc/1/root). When that cannot be looked at, the mount is
// trusted.
func (c *Core) reachesNode(dir string) bool {
	root := c.cfg.HostRoot
	if root == "" {
		root = "/"
	}
	var here, there unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "proc", "1", "root", dir), &there); err != nil {
		return true
	}
	if err := unix.Stat(dir, &here); err != nil {
		return false
	}
	return here.Dev == there.Dev && here.Ino == there.Ino
}

// removeAcctDir unmounts dir (every mount stacked on it; containers keep
// their own binds of it until they exit) and removes what is left.
func removeAcctDir(dir string) error {
	for range 16 {
		err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not a mount point (any more), or not there
		}
		if errors.Is(err, unix.EPERM) && !onOwnDevice(dir) {
			break // without CAP_SYS_ADMIN umount says EPERM first: nothing is mounted here anyway
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return os.RemoveAll(dir)
}

// onOwnDevice: dir is on another device than its parent, as the tmpfs of
// an accounting dir is (makeAcctDir), and a dir that is not a mount point
// is not. Not a link: an lstat.
func onOwnDevice(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return true // unknown: let the unmount error stand
	}
	return st.Dev != parent.Dev
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
	return c.lockFile(stateLockFile, exclusive)
}

// lockFile takes the flock of the state directory's file name.
func (c *Core) lockFile(name string, exclusive bool) (func(), error) {
	// New made the state dir (it holds the board dir).
	f, err := os.OpenFile(filepath.Join(c.cfg.StateDir, name), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
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
	// the stamp before the directory (makeAcctDir replaces one without)
	for _, sub := range []string{stateTenants, stateAcctOwner, stateAcct} {
		root := filepath.Join(c.cfg.StateDir, sub)
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if live[e.Name()] {
				continue
			}
			path := filepath.Join(root, e.Name())
			if err := removeAcctDir(path); err != nil {
				c.log.WithError(err).WithField("dir", path).Warn("tenant directory not collected")
			}
		}
	}
}
