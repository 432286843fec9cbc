package agentapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/gpuext/gpuext/internal/failmode"
)

// The API's paths.
const (
	PathAdmit    = "/v1/admit"
	PathRegister = "/v1/register"
	PathRemove   = "/v1/remove"
	// PathSetPolicy changes a running tenant's policy (gpuextctl tenants
	// set-policy).
	PathSetPolicy = "/v1/set-policy"
	// PathGC runs one reconcile round in the agent now (gpuextctl gc).
	PathGC = "/v1/gc"
)

// MaxRequest bounds a request body and an answer: a container's info with
// its labels, annotations and env.
const MaxRequest = 4 << 20

// ErrUnavailable wraps every failure to reach the agent (no socket, refused,
// timed out, an answer that is not the API's). The caller applies its fail
// mode to it.
var ErrUnavailable = errors.New("gpuext agent unavailable")

// Request is a container as a runtime path sees it.
type Request struct {
	Info ContainerInfo `json:"info"`
	// Change is set-policy's request (Info is then empty).
	Change *PolicyChange `json:"change,omitempty"`
	// GC is gc's request (Info is then empty).
	GC *GCRequest `json:"gc,omitempty"`
}

// GCRequest asks the agent for one reconcile round, as its periodic one
// does, now: drop the registry entries of the OCI paths (and with All, of
// NRI too) whose cgroup is gone, and tenants reserved longer than Grace
// that never got a cgroup.
type GCRequest struct {
	Grace time.Duration `json:"graceNs"`
	All   bool          `json:"all,omitempty"`
}

// Response is the outcome: a decision, or an error. Refused is set when
// the agent's core refused the container (strict mode).
type Response struct {
	Decision *Answer `json:"decision,omitempty"`
	Error    string  `json:"error,omitempty"`
	Kind     string  `json:"kind,omitempty"`
	Refused  bool    `json:"refused,omitempty"`
	// Cgroup is the registered cgroup (register).
	CgroupID   uint64 `json:"cgroupId,omitempty"`
	CgroupPath string `json:"cgroupPath,omitempty"`
	// Dropped counts the entries a gc dropped (also beside its error).
	Dropped int `json:"dropped,omitempty"`
}

// Client calls the agent over its socket. It speaks the one exchange the
// API needs (an HTTP/1.0 POST of a JSON body, the answer read to the end)
// with net and net/textproto, not net/http: net/http links TLS and HTTP/2,
// which would double the size of the hooks that import this package.
type Client struct {
	socket  string
	timeout time.Duration
}

// DefaultTimeout bounds one call: OCI hooks run under the runtime's hook
// timeout (10 s for the hooks gpuext-runc adds).
const DefaultTimeout = 5 * time.Second

// maxHeader bounds the status line and headers of an answer.
const maxHeader = 64 << 10

// NewClient returns a client of the agent listening at socket.
func NewClient(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{socket: socket, timeout: timeout}
}

// post sends body to path and returns the answer's status and body.
func (c *Client) post(path string, body []byte) (int, []byte, error) {
	// DialUnix, not a Dialer: no resolver is linked for an address that
	// needs none (a unix socket connects or fails at once)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: c.socket, Net: "unix"})
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, nil, err
	}
	req := fmt.Sprintf("POST %s HTTP/1.0\r\nHost: gpuext-agent\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, len(body))
	if _, err := conn.Write(append([]byte(req), body...)); err != nil {
		return 0, nil, err
	}
	// the server answers HTTP/1.0 without chunks and closes the connection
	tp := textproto.NewReader(bufio.NewReader(io.LimitReader(conn, maxHeader+MaxRequest)))
	line, err := tp.ReadLine()
	if err != nil {
		return 0, nil, fmt.Errorf("status line: %w", err)
	}
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
		return 0, nil, fmt.Errorf("status line %q: not HTTP/1.x", shorten(line))
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return 0, nil, fmt.Errorf("headers: %w", err)
	}
	if te := hdr.Get("Transfer-Encoding"); te != "" {
		return 0, nil, fmt.Errorf("transfer-encoding %q: want none", shorten(te))
	}
	var out []byte
	if cl := hdr.Get("Content-Length"); cl != "" {
		n, err := strconv.Atoi(cl)
		if err != nil || n < 0 || n > MaxRequest {
			return 0, nil, fmt.Errorf("content-length %q: want 0 to %d", shorten(cl), MaxRequest)
		}
		out = make([]byte, n)
		if _, err := io.ReadFull(tp.R, out); err != nil {
			return 0, nil, fmt.Errorf("body: %w", err)
		}
	} else if out, err = io.ReadAll(io.LimitReader(tp.R, MaxRequest+1)); err != nil {
		return 0, nil, fmt.Errorf("body: %w", err)
	} else if len(out) > MaxRequest {
		return 0, nil, fmt.Errorf("body over %d bytes", MaxRequest)
	}
	return status, out, nil
}

// shorten cuts what the agent's socket answered for an error message.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func (c *Client) call(path string, req Request) (Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	status, data, err := c.post(path, body)
	if err != nil {
		return Response{}, fmt.Errorf("%w at %s: %w", ErrUnavailable, c.socket, err)
	}
	var out Response
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&out); err != nil {
		return Response{}, fmt.Errorf("%w at %s: bad answer (HTTP %d): %w", ErrUnavailable, c.socket, status, err)
	}
	if status != 200 {
		return Response{}, fmt.Errorf("%w at %s: HTTP %d: %s", ErrUnavailable, c.socket, status, out.Error)
	}
	if out.Error != "" {
		if out.Refused {
			return out, fmt.Errorf("%w: %s", failmode.ErrRefused, trimRefused(out.Error))
		}
		return out, errors.New(out.Error)
	}
	return out, nil
}

// trimRefused drops the sentinel's text the agent's error starts with, so
// that the error wrapped again does not say it twice.
func trimRefused(msg string) string {
	p := failmode.ErrRefused.Error() + ": "
	if len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

func (c *Client) answer(path string, req Request) (Response, error) {
	out, err := c.call(path, req)
	if err != nil {
		return out, err
	}
	if out.Decision == nil {
		return Response{}, fmt.Errorf("%w at %s: answer without a decision", ErrUnavailable, c.socket)
	}
	return out, nil
}

// Admit asks the agent to admit the container (the runc wrapper, before
// runc create). The agent's core has applied the fail mode: an error is a
// refusal (wraps failmode.ErrRefused) or wraps ErrUnavailable.
func (c *Client) Admit(info ContainerInfo) (Answer, error) {
	out, err := c.answer(PathAdmit, Request{Info: info})
	if err != nil {
		return Answer{}, err
	}
	return *out.Decision, nil
}

// Registration is the answer of RegisterOCI: the decision applied and the
// cgroup registered under it (none for a skipped decision).
type Registration struct {
	Answer
	CgroupID   uint64
	CgroupPath string
}

// RegisterOCI asks the agent to register the container's cgroup (the OCI
// hook at createRuntime): by the decision annotation the wrapper wrote, or
// admitting it first when there is none (admission.Core.RegisterOCI).
func (c *Client) RegisterOCI(info ContainerInfo) (Registration, error) {
	out, err := c.answer(PathRegister, Request{Info: info})
	if err != nil {
		return Registration{}, err
	}
	return Registration{Answer: *out.Decision, CgroupID: out.CgroupID, CgroupPath: out.CgroupPath}, nil
}

// Remove asks the agent to detach the container (poststop, or a wrapper
// whose config.json edit failed).
func (c *Client) Remove(info ContainerInfo) error {
	_, err := c.call(PathRemove, Request{Info: info})
	return err
}

// SetPolicy asks the agent to change a running tenant's policy. A refusal
// (what admission would refuse) is an error with the agent's keyed message
// and kind (request, constraint); it does not wrap failmode.ErrRefused.
// ErrUnknownTenant: a policy change names no tenant of the registry.
var ErrUnknownTenant = errors.New("no such tenant")

// KindNotFound is the error kind of an answer about a tenant the agent
// does not know (set-policy); admission of a container never has it.
const KindNotFound = "not-found"

func (c *Client) SetPolicy(pc PolicyChange) (Answer, error) {
	out, err := c.answer(PathSetPolicy, Request{Change: &pc})
	if err != nil {
		switch out.Kind {
		case "":
			return Answer{}, err
		case KindNotFound: // the caller's mistake: errors.Is finds it
			return Answer{}, fmt.Errorf("%w%s", ErrUnknownTenant, strings.TrimPrefix(out.Error, ErrUnknownTenant.Error()))
		}
		return Answer{}, fmt.Errorf("%s (%s)", out.Error, out.Kind)
	}
	return *out.Decision, nil
}

// GC asks the agent for one reconcile round now and returns how many
// registry entries it dropped; an error of the round comes with the count
// of what it dropped before.
func (c *Client) GC(req GCRequest) (int, error) {
	out, err := c.call(PathGC, Request{GC: &req})
	return out.Dropped, err
}
