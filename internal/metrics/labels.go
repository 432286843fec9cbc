package metrics

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpuext/gpuext/bpf"
)

// Bounds of what one scrape shows. Label values come from what runtimes and
// tenants named (pod, container, policy, a kernel ops name): each is cut.
const (
	// MaxLabelBytes is the longest label value: valid UTF-8 of at most
	// this many bytes (Kubernetes names are at most 253).
	MaxLabelBytes = 253
	// MaxTenants is the most tenants one scrape shows; the rest are
	// counted in gpuext_metrics_tenants_omitted.
	MaxTenants = 1024
	// MaxContainerNames is the most container names a pod tenant's
	// container label lists; more show as "+N".
	MaxContainerNames = 8
)

// labelValue is s as a label value: invalid UTF-8 replaced, control
// characters dropped, cut at a rune boundary to at most MaxLabelBytes.
func labelValue(s string) string {
	if len(s) <= MaxLabelBytes && utf8.ValidString(s) && !strings.ContainsFunc(s, isControl) {
		return s
	}
	s = strings.Map(func(r rune) rune {
		if isControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= MaxLabelBytes {
		return s
	}
	cut := MaxLabelBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// tenantLabels are the labels every per-tenant metric has, in this order.
var tenantLabels = []string{"namespace", "pod", "container", "tenant", "policy"}

// labelsOf is a tenant's label values: its pod, its containers' names (a
// pod tenant has several: sorted, joined with ",", at most
// MaxContainerNames), its id and policy. A tenant reserved but not started
// has no container yet: those labels are empty.
func labelsOf(t bpf.Tenant) []string {
	var ns, pod string
	names := make([]string, 0, len(t.Cgroups))
	for _, cg := range t.Cgroups {
		if ns == "" && pod == "" {
			ns, pod = cg.PodNamespace, cg.PodName
		}
		name := cg.ContainerName
		if name == "" {
			name = cg.ContainerID
		}
		names = append(names, name)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	if n := len(names); n > MaxContainerNames {
		names = append(names[:MaxContainerNames], "+"+strconv.Itoa(n-MaxContainerNames))
	}
	return []string{labelValue(ns), labelValue(pod), labelValue(strings.Join(names, ",")),
		strconv.FormatUint(uint64(t.ID), 10), labelValue(t.Policy)}
}
