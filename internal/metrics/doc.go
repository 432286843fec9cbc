// Package metrics is the host agent's Prometheus endpoint (/metrics,
// client_golang), off unless the config sets metricsAddress
// (docs/metrics.md lists every metric).
//
// Two kinds of metric, kept apart:
//
//   - The agent's own (Agent): admissions by runtime and outcome, keyed
//     request errors, fail-open decisions, the admission latency histogram,
//     registrations and reconcile runs. Counted as they happen: Agent is
//     the admission core's Observer.
//   - Per tenant (TenantCollector): quota, device memory used and peak,
//     refused allocations, delayed launches, device-probe counters and the
//     launch-latency histogram, and the kernel core's counters when the
//     gpuext core is loaded. Read at scrape time by a prometheus.Collector,
//     never by a goroutine that polls: a tenant that is gone is gone from
//     the next scrape.
//
// What a tenant can write is hostile input here too: the usage file and the
// probes' files are read through lib/tenantfs (no links, regular files
// only, bounded sizes, pread), a scrape reads at most MaxTenants tenants and
// a bounded number of bytes of each, and every label value is cut to valid
// UTF-8 of at most MaxLabelBytes. A file that is refused shows as a state
// (gpuext_tenant_usage_state) instead of values.
package metrics
