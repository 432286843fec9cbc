package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/config"
)

// paramFlags collects repeated --param KEY=VALUE.
type paramFlags map[string]string

func (p paramFlags) String() string { return "" }

func (p paramFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("--param %q: want KEY=VALUE (KEY as quota or quota.gpuext.io)", v)
	}
	if _, dup := p[k]; dup {
		return fmt.Errorf("--param %q: %s given twice", v, k)
	}
	p[k] = val
	return nil
}

// setPolicy is `tenants set-policy TENANT POLICY [--param K=V]...`: the
// agent re-selects the tenant's policy as admission would
// (admission.Core.SetPolicy) and applies it to the running tenant.
func setPolicy(cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tenants set-policy", flag.ContinueOnError)
	socket := fs.String("socket", cfg.AgentSocket, "the agent's API socket")
	timeout := fs.Duration("timeout", agentapi.DefaultTimeout, "how long to wait for the agent")
	params := paramFlags{}
	fs.Var(params, "param", "a further key of the request, KEY=VALUE (quota=2GiB, priority=best-effort); repeatable")
	if err := parseFlags(fs, reorderFlags(args), out); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("usage: gpuextctl tenants set-policy TENANT POLICY [--param KEY=VALUE]... " +
			"(TENANT: the id or key gpuextctl tenants shows)")
	}
	d, err := agentapi.NewClient(*socket, *timeout).SetPolicy(agentapi.PolicyChange{Tenant: fs.Arg(0), Policy: fs.Arg(1),
		Params: params})
	var oe *net.OpError
	if errors.Is(err, agentapi.ErrUnavailable) && errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Errorf("set-policy %s %s: %w", fs.Arg(0), fs.Arg(1), agentDown(*socket, err))
	}
	if errors.Is(err, agentapi.ErrUnknownTenant) {
		return fmt.Errorf("set-policy %s %s: %w: `gpuextctl tenants` lists the tenants (TENANT is the id; "+
			"`gpuextctl tenants -o json` shows each key)", fs.Arg(0), fs.Arg(1), err)
	}
	if err != nil {
		return fmt.Errorf("set-policy %s %s: %w", fs.Arg(0), fs.Arg(1), err)
	}
	fmt.Fprintf(out, "tenant %d (%s): policy %s, config %s\n", d.Tenant, d.TenantKey, d.Policy, d.ConfigDigest)
	return nil
}
