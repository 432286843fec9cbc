package admission

import "time"

// Observer is told what the core did, for the agent's metrics
// (internal/metrics implements it). Its methods are called on the
// admission path: they must be quick, must not block and must not call
// the core.
type Observer interface {
	// Admitted: one Admit call (also the one RegisterOCI makes for a hook
	// without the wrapper), with the decision and error it returned and
	// how long it took.
	Admitted(info ContainerInfo, d Decision, err error, took time.Duration)
	// Registered: one Register call, with what it returned.
	Registered(info ContainerInfo, d Decision, err error)
	// Reconciled: one Reconcile run: the entries it dropped, its error.
	Reconciled(dropped int, err error, took time.Duration)
}

// SetObserver makes o see every admission, registration and reconcile of
// the core from now on. Call it before the core is shared (it is not
// synchronised with calls in flight); nil turns observation off.
func (c *Core) SetObserver(o Observer) { c.obs = o }
