// Package failmode is the one rule of what happens to a container when
// gpuext fails for it: the config's failMode ("fail-open", the default, or
// "strict"), the kinds of error (a bad request, a request the admin
// constraints forbid, gpuext's own failure) and Decide, the table every
// runtime path applies: the agent's admission core to its own errors, the
// OCI hook and the runc wrapper to the errors that come before the agent
// answers (no agent, an unreadable bundle). It imports nothing of the core,
// so the thin hooks share it.
package failmode
