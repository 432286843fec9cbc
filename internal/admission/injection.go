package admission

import (
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

// injection builds the mounts and env of the device-runtime contract
// (docs/injection.md).
func (c *Core) injection(info ContainerInfo, id bpf.TenantID, tenantDir, acctDir string, p policies.Policy) Injection {
	lib := ContainerDevrtDir + "/" + DevrtLibrary
	inj := Injection{
		Mounts: []Mount{
			{Source: c.cfg.DevrtDir, Destination: ContainerDevrtDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			{Source: tenantDir, Destination: ContainerTenantDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			{Source: acctDir, Destination: ContainerAcctDir, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
			{Source: c.boardDir(), Destination: ContainerBoardDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
		},
		Env: []EnvVar{
			{Key: EnvLDPreload, Value: AppendPreload(lookupEnv(info.Env, EnvLDPreload), lib)},
			{Key: EnvTenantID, Value: strconv.FormatUint(uint64(id), 10)},
			{Key: EnvTenantDir, Value: ContainerTenantDir},
			{Key: EnvTenantConfig, Value: ContainerTenantDir + "/" + TenantConfigFile},
			{Key: EnvDevrtDir, Value: ContainerDevrtDir},
			{Key: EnvPolicy, Value: p.Name},
			{Key: EnvTenantAcct, Value: ContainerAcctDir},
			{Key: EnvBoard, Value: ContainerBoardDir + "/" + BoardFile},
		},
	}
	if d := c.cfg.MPSPipeDir; d != "" {
		// Only the client socket, not the directory: measured on the H200
		// (test/gpu mps-control), a CUDA client needs "control" alone, and
		// through it the daemon refuses the commands that change its
		// defaults and quit (they need "control_privileged", which stays on
		// the host); read-only queries (get_server_list) still answer. But
		// from root it takes set_active_thread_percentage of a running
		// server (H100, mps-tenant-daemon-settings): mpsRootTenants.
		sock := d + "/" + MPSClientSocket
		if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
			// A bind mount of a missing source fails the container in the
			// runtime with an error that does not say why: start it as a
			// plain (time-sliced) client instead, and say so.
			log := c.mpsLog()
			why := "not a socket"
			if err != nil {
				why = err.Error()
			}
			log.WithFields(logrus.Fields{"container": info.Name, "tenant": id, "mpsPipeDirectory": d, "socket": sock, "reason": why}).
				Warn("no MPS control daemon socket: the container is not an MPS client (start nvidia-cuda-mps-control -d before GPU containers)")
		} else if info.User.HostRoot() && c.cfg.MPSRootTenants == MPSRootDeny {
			c.mpsLog().WithFields(logrus.Fields{"container": info.Name, "tenant": id, "uid": info.User.UID, "userKnown": info.User.Known}).
				Warn("the container may run as the host's root: not an MPS client (mpsRootTenants: deny), since root can change a running MPS server's share through the control socket; run it as a non-root user to give it its SM share")
		} else {
			if info.User.HostRoot() {
				c.mpsLog().WithFields(logrus.Fields{"container": info.Name, "tenant": id, "uid": info.User.UID, "userKnown": info.User.Known}).
					Warn("an MPS client that may run as the host's root: it can change a running MPS server's share, its neighbours' too (run it as a non-root user, or set mpsRootTenants: deny)")
			}
			inj.Mounts = append(inj.Mounts, Mount{Source: sock, Destination: sock,
				Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
			inj.Env = append(inj.Env, EnvVar{Key: EnvMPSPipeDir, Value: d})
		}
	}
	if d := c.cfg.MPSShmDir; d != "" {
		inj.Mounts = append(inj.Mounts, Mount{Source: d, Destination: "/dev/shm", Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}})
	}
	return inj
}

// MPSClientSocket is the one entry of the MPS pipe directory a tenant
// container gets: the socket CUDA clients connect to.
const MPSClientSocket = "control"

// EnvMPSPipeDir is where CUDA looks for the MPS control daemon (the name
// the interposer reads too, from gpuext_devrt_env.h).
const EnvMPSPipeDir = tenantcfg.EnvMPSPipeDir

// AppendPreload appends lib to an LD_PRELOAD value unless it is already there.
// ld.so accepts both ':' and ' ' as separators; ':' is used.
func AppendPreload(existing, lib string) string {
	for _, f := range strings.FieldsFunc(existing, func(r rune) bool { return r == ':' || r == ' ' }) {
		if f == lib {
			return existing
		}
	}
	if strings.TrimSpace(existing) == "" {
		return lib
	}
	return existing + ":" + lib
}

func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as execve users see it
		}
	}
	return v
}

// mpsLog is the logger of the MPS injection's warnings.
func (c *Core) mpsLog() *logrus.Entry {
	if c.log == nil {
		return logrus.NewEntry(logrus.StandardLogger())
	}
	return c.log
}
