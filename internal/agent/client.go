package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/admission"
)

// Client calls the agent over its socket.
type Client struct {
	socket string
	http   *http.Client
}

// DefaultTimeout bounds one call: OCI hooks run under the runtime's hook
// timeout (10 s for the hooks gpuext-runc adds).
const DefaultTimeout = 5 * time.Second

// NewClient returns a client of the agent listening at socket.
func NewClient(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}, DisableKeepAlives: true}
	return &Client{socket: socket, http: &http.Client{Transport: tr, Timeout: timeout}}
}

func (c *Client) call(path string, info admission.ContainerInfo) (response, error) {
	return c.callReq(path, request{Info: info})
}

func (c *Client) callReq(path string, req request) (response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return response{}, err
	}
	resp, err := c.http.Post("http://gpuext-agent"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return response{}, fmt.Errorf("%w at %s: %w", ErrUnavailable, c.socket, err)
	}
	defer resp.Body.Close()
	var out response
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxRequest)).Decode(&out); err != nil {
		return response{}, fmt.Errorf("%w at %s: bad answer (HTTP %d): %w", ErrUnavailable, c.socket, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return response{}, fmt.Errorf("%w at %s: HTTP %d: %s", ErrUnavailable, c.socket, resp.StatusCode, out.Error)
	}
	if out.Error != "" {
		if out.Refused {
			return out, fmt.Errorf("%w: %s", admission.ErrRefused, trimRefused(out.Error))
		}
		return out, errors.New(out.Error)
	}
	return out, nil
}

// trimRefused drops the sentinel's text the agent's error starts with, so
// that the error wrapped again does not say it twice.
func trimRefused(msg string) string {
	p := admission.ErrRefused.Error() + ": "
	if len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

// Admit asks the agent to admit the container (the runc wrapper, before
// runc create). The agent's core has applied the fail mode: an error is a
// refusal (wraps admission.ErrRefused) or wraps ErrUnavailable.
func (c *Client) Admit(info admission.ContainerInfo) (admission.Decision, error) {
	out, err := c.call(pathAdmit, info)
	if err != nil {
		return admission.Decision{}, err
	}
	if out.Decision == nil {
		return admission.Decision{}, fmt.Errorf("%w: answer without a decision", ErrUnavailable)
	}
	return fromWire(out.Decision), nil
}

// RegisterOCI asks the agent to register the container's cgroup (the OCI
// hook at createRuntime): by the decision annotation the wrapper wrote, or
// admitting it first when there is none (admission.Core.RegisterOCI).
func (c *Client) RegisterOCI(info admission.ContainerInfo) (admission.Decision, cgroup.Cgroup, error) {
	out, err := c.call(pathRegister, info)
	if err != nil {
		return admission.Decision{}, cgroup.Cgroup{}, err
	}
	if out.Decision == nil {
		return admission.Decision{}, cgroup.Cgroup{}, fmt.Errorf("%w: answer without a decision", ErrUnavailable)
	}
	return fromWire(out.Decision), cgroup.Cgroup{ID: cgroup.ID(out.CgroupID), Path: out.CgroupPath}, nil
}

// Remove asks the agent to detach the container (poststop, or a wrapper
// whose config.json edit failed).
func (c *Client) Remove(info admission.ContainerInfo) error {
	_, err := c.call(pathRemove, info)
	return err
}

// SetPolicy asks the agent to change a running tenant's policy. A refusal
// (what admission would refuse) is an error with the agent's keyed message
// and kind (KindRequest, KindConstraint); it does not wrap ErrRefused. A
// tenant the agent does not know wraps admission.ErrUnknownTenant.
func (c *Client) SetPolicy(pc admission.PolicyChange) (admission.Decision, error) {
	out, err := c.callReq(pathSetPolicy, request{Change: &pc})
	if err != nil {
		switch out.Kind {
		case "":
			return admission.Decision{}, err
		case string(admission.KindNotFound): // the caller's mistake: errors.Is finds it
			return admission.Decision{}, fmt.Errorf("%w%s", admission.ErrUnknownTenant,
				strings.TrimPrefix(out.Error, admission.ErrUnknownTenant.Error()))
		}
		return admission.Decision{}, fmt.Errorf("%s (%s)", out.Error, out.Kind)
	}
	if out.Decision == nil {
		return admission.Decision{}, fmt.Errorf("%w: answer without a decision", ErrUnavailable)
	}
	return fromWire(out.Decision), nil
}
