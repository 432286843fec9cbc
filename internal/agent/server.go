package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agentapi"
)

// Core is what the server needs of the admission core.
type Core interface {
	Admit(admission.ContainerInfo) (admission.Decision, error)
	RegisterOCI(admission.ContainerInfo) (admission.Decision, cgroup.Cgroup, error)
	Remove(admission.ContainerInfo) error
}

// PolicySetter is the part of the core that changes a running tenant's
// policy (/v1/set-policy); a core without it answers that it cannot.
type PolicySetter interface {
	SetPolicy(admission.PolicyChange) (admission.Decision, error)
}

// Reconciler is the part of the core that collects stale registry entries
// (/v1/gc); a core without it answers that it cannot.
type Reconciler interface {
	Reconcile(grace time.Duration, runtimes ...bpf.Runtime) (int, error)
}

// Server serves the agent API for one core.
type Server struct {
	core func() (Core, error)
	log  *logrus.Entry
	ln   net.Listener
	srv  *http.Server
}

// Listen creates the socket at path and returns a server that hands every
// request to the core core returns (the NRI plugin's current one: it
// changes when containerd reconfigures the plugin).
//
// The socket's directory is the agent's own (ownSocketDir): made 0700
// when it is missing, taken when it is empty (what the kubelet's
// DirectoryOrCreate makes) or already root's alone, and an error naming it
// otherwise: a shared directory (/tmp, /run) is never chmodded. Only an
// earlier agent's socket is replaced: anything else at path (a file, a
// link, a directory) is an error naming it, and is left alone. The socket
// is 0600.
func Listen(path string, core func() (Core, error), log *logrus.Entry) (*Server, error) {
	if err := ownSocketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	s := &Server{core: core, log: log, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+agentapi.PathAdmit, s.handle(s.admit))
	mux.HandleFunc("POST "+agentapi.PathRegister, s.handle(s.register))
	mux.HandleFunc("POST "+agentapi.PathRemove, s.handle(s.remove))
	mux.HandleFunc("POST "+agentapi.PathSetPolicy, s.handleReq(s.setPolicy))
	mux.HandleFunc("POST "+agentapi.PathGC, s.handleReq(s.gc))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	return s, nil
}

type connKey struct{}

// Serve serves until Close.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ownSocketDir makes dir the agent's own socket directory, or says why it
// is not one.
func ownSocketDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrNotExist) { // its parent is missing too
		err = os.MkdirAll(dir, 0o700)
	}
	if err == nil {
		return nil // made here: the agent's
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("agent socket dir %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("agent socket dir %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("agent socket dir %s: not a directory (a link or a file): the agent needs a directory of its own", dir)
	}
	if st.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("agent socket dir %s: owned by uid %d, not the agent's (%d): the agent needs a directory of its own",
			dir, st.Uid, os.Geteuid())
	}
	if st.Mode&0o777 == 0o700 {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("agent socket dir %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSocket == 0 {
			return fmt.Errorf("agent socket dir %s: mode %04o and it holds %q: a shared directory, which the agent does not chmod; "+
				"give agentSocket a directory of its own (default %s)", dir, st.Mode&0o7777, e.Name(), "/run/gpuext-agent/agent.sock")
		}
	}
	// empty (sockets aside): a directory made for the agent
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("agent socket dir %s: %w", dir, err)
	}
	return nil
}

// removeStaleSocket removes an earlier agent's socket at path (one that
// died, or a rolling update's old pod, which serves on until it exits);
// anything that is not a socket is an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("agent socket %s: there is a %s there, not a socket: not removed", path, typeName(fi.Mode()))
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("agent socket: remove stale %s: %w", path, err)
	}
	return nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file of type " + m.Type().String()
}

// Close stops the server and removes the socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// peerIsRoot checks the connecting process's uid: the socket's mode already
// keeps others out; this holds if an operator loosened it.
func peerIsRoot(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if cred.Uid != 0 {
		return fmt.Errorf("peer uid %d (pid %d) is not root", cred.Uid, cred.Pid)
	}
	return nil
}

func (s *Server) handle(fn func(Core, admission.ContainerInfo) agentapi.Response) http.HandlerFunc {
	return s.handleReq(func(c Core, req agentapi.Request) agentapi.Response { return fn(c, req.Info) })
}

func (s *Server) handleReq(fn func(Core, agentapi.Request) agentapi.Response) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		reply := func(code int, resp agentapi.Response) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(resp)
		}
		if c, ok := r.Context().Value(connKey{}).(net.Conn); !ok || peerIsRoot(c) != nil {
			err := errors.New("peer credentials not accepted")
			if ok {
				err = peerIsRoot(c)
			}
			s.log.WithError(err).Warn("agent API: refused a connection")
			reply(http.StatusForbidden, agentapi.Response{Error: err.Error()})
			return
		}
		var req agentapi.Request
		dec := json.NewDecoder(io.LimitReader(r.Body, agentapi.MaxRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			reply(http.StatusBadRequest, agentapi.Response{Error: fmt.Sprintf("bad request: %v", err)})
			return
		}
		core, err := s.core()
		if err != nil {
			reply(http.StatusServiceUnavailable, agentapi.Response{Error: err.Error(), Kind: string(admission.KindInternal)})
			return
		}
		reply(http.StatusOK, fn(core, req))
	}
}

func outcome(d admission.Decision, err error) agentapi.Response {
	if err != nil {
		return agentapi.Response{Error: err.Error(), Kind: string(admission.KindOf(err)), Refused: errors.Is(err, admission.ErrRefused)}
	}
	return agentapi.Response{Decision: answer(d)}
}

func (s *Server) admit(c Core, info admission.ContainerInfo) agentapi.Response {
	return outcome(c.Admit(info))
}

func (s *Server) register(c Core, info admission.ContainerInfo) agentapi.Response {
	d, cg, err := c.RegisterOCI(info)
	resp := outcome(d, err)
	resp.CgroupID, resp.CgroupPath = uint64(cg.ID), cg.Path
	return resp
}

func (s *Server) remove(c Core, info admission.ContainerInfo) agentapi.Response {
	if err := c.Remove(info); err != nil {
		return agentapi.Response{Error: err.Error(), Kind: string(admission.KindInternal)}
	}
	return agentapi.Response{}
}

func (s *Server) setPolicy(c Core, req agentapi.Request) agentapi.Response {
	ps, ok := c.(PolicySetter)
	if !ok {
		return agentapi.Response{Error: "this agent's core cannot change a tenant's policy", Kind: string(admission.KindInternal)}
	}
	if req.Change == nil {
		return agentapi.Response{Error: "bad request: no change", Kind: string(admission.KindRequest)}
	}
	d, err := ps.SetPolicy(*req.Change)
	if err != nil {
		return agentapi.Response{Error: err.Error(), Kind: string(admission.KindOf(err))}
	}
	s.log.WithFields(logrus.Fields{"tenant": d.Tenant, "tenantKey": d.TenantKey, "policy": d.Policy.Name}).
		Info("agent API: changed a tenant's policy")
	return agentapi.Response{Decision: answer(d)}
}

// gc runs one reconcile round now, as the agent's periodic one does: the
// OCI paths' entries, and with All the NRI plugin's too.
func (s *Server) gc(c Core, req agentapi.Request) agentapi.Response {
	rc, ok := c.(Reconciler)
	if !ok {
		return agentapi.Response{Error: "this agent's core cannot collect stale entries", Kind: string(admission.KindInternal)}
	}
	if req.GC == nil {
		return agentapi.Response{Error: "bad request: no gc", Kind: string(admission.KindRequest)}
	}
	if req.GC.Grace < 0 {
		return agentapi.Response{Error: fmt.Sprintf("bad request: grace %s: want 0 or more", req.GC.Grace),
			Kind: string(admission.KindRequest)}
	}
	runtimes := []bpf.Runtime{bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper}
	if req.GC.All {
		runtimes = append(runtimes, bpf.RuntimeNRI)
	}
	n, err := rc.Reconcile(req.GC.Grace, runtimes...)
	log := s.log.WithFields(logrus.Fields{"dropped": n, "grace": req.GC.Grace.String(), "all": req.GC.All})
	if err != nil {
		log.WithError(err).Warn("agent API: gc finished with errors")
		return agentapi.Response{Dropped: n, Error: err.Error(), Kind: string(admission.KindInternal)}
	}
	log.Info("agent API: gc")
	return agentapi.Response{Dropped: n}
}

// answer is d as the API carries it.
func answer(d admission.Decision) *agentapi.Answer {
	a := d.Answer()
	return &a
}
