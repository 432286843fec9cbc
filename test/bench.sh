#!/usr/bin/env bash
# bench.sh (make bench): control-plane benchmarks, written to bench/results.txt
# with the machine noted. Not a timed test: nothing here passes or fails on
# a number.
#   1. admission latency in-process: NRI CreateContainer + StartContainer
#      through the nri module's runtime side, p50/p99 over 1,000 containers;
#   2. real crictl create+start with the plugin vs without, two private
#      containerds side by side in one run, interleaved, as a ratio;
#   3. docker run through gpuext-runc, the hook and the agent vs plain runc
#      (test/bench-docker.sh), interleaved, as a ratio;
#   4. the priority board publisher's CPU (getrusage) over 100 tenants, 10 s
#      each: idle, one latency-critical tenant busy, one serving requests;
#   5. the agent's /metrics at 200 tenants: CPU per scrape, response size;
#   6. pod start through a real kubelet with the agent's DaemonSet vs without
#      (test/bench-k8s.sh), as a ratio.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="$REPO/bin"
N="${GPUEXT_BENCH_N:-150}"
OUT="$REPO/bench/results.txt"
mkdir -p "$REPO/bench"
[[ $(id -u) -eq 0 ]] || { echo "bench: needs root" >&2; exit 1; }
log() { printf '[bench] %s\n' "$*" >&2; }
# gobench NAME PKG BENCHTIME COUNT METRIC: the lines of Go benchmark NAME in
# PKG that report METRIC; the run stops when there are none
gobench() {
	local lines
	lines=$(cd "$REPO" && go test -run '^$' -bench "^$1\$" -benchtime "$3" -count "$4" "$2" 2>/dev/null | grep -E "$5" || true)
	[[ -n "$lines" ]] || { echo "bench: $1 produced no result" >&2; exit 1; }
	echo "$lines"
}

{
	echo "# gpuext control-plane benchmarks"
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit:  $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "machine: $(uname -srm); $(nproc) cpus; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "note:    shared CI-class VM; absolute times are indicative only, ratios are measured side by side"
	echo
} >"$OUT"

log "1/2 admission latency in-process (1,000 containers)"
bench=$(gobench BenchmarkAdmission ./nri-plugin/plugin/ 1000x 3 'p50-plugin-us')
{
	echo "## Admission latency, 1,000 containers in-process, 3 runs"
	echo "NRI CreateContainer + StartContainer (where registration happens) on real cgroups, pinned maps, tmpfs state dir."
	echo "plugin = time inside the plugin's handlers; roundtrip = what the runtime side (nri pkg/adaptation) sees, ttrpc included."
	echo "Target: p99 < 1000 us."
	echo "$bench" | grep -o '[0-9.]* p50-plugin-us.*' | sed 's/^/  /'
	echo
} >>"$OUT"

log "board publisher CPU, 100 tenants (3 x 10 s)"
board=$(gobench BenchmarkPublisherCPU ./devrt/board/ 1x 1 'cpu-%')
{
	echo "## Board publisher CPU, 100 tenants (10 latency-critical, 6 ms window), 10 s each, getrusage of the publisher's process"
	echo "idle: nothing pending; lc-active: one latency-critical tenant launching 1 ms kernels back to back (interposer over the fake libcuda);"
	echo "lc-requests: one serving a request (8 kernels of 100 us) every 20 ms."
	echo "Targets: idle <= 0.5%, one latency-critical tenant active <= 2%."
	echo "$board" | sed 's/^BenchmarkPublisherCPU\///; s/^/  /'
	echo
} >>"$OUT"

log "metrics scrape, 200 tenants (real pinned registry, HTTP with gzip)"
scrape=$(gobench 'BenchmarkScrape200Tenants.*' ./internal/metrics/ 50x 3 'cpu-ms/scrape')
{
	echo "## /metrics scrape at 200 tenants, 3 runs of 50 scrapes"
	echo "The agent's CPU per scrape (getrusage of the serving process) and the response size, plain and gzip (what Prometheus asks for)."
	echo "$scrape" | sed 's/^BenchmarkScrape200Tenants//; s/^/  /'
	echo
} >>"$OUT"

log "memory guard, 100 tenants on 8 GPUs (fake NVML), 3 runs of 10 s"
guard=$(gobench BenchmarkGuardCPU ./internal/memguard/ 1x 3 'agent-cpu-%')
{
	echo "## GPU memory guard CPU, 100 tenants (real cgroups, 2 processes each) on 8 GPUs, NVML sampled every 500 ms, 3 runs of 10 s"
	echo "agent = the agent's side (decode, pid to cgroup, limits, checks; getrusage); gpuview = gpuext-gpuview --watch over the fake NVML."
	echo "Target: both together <= 0.5% of one core. The real driver's side: make gpu-test section memguard (memguard-cpu)."
	echo "$guard" | sed 's/^BenchmarkGuardCPU-[0-9]*//; s/^/  /'
	echo
} >>"$OUT"

log "latency controller, one step on 100 tenants, 3 runs of 200 steps"
ctl=$(gobench BenchmarkControllerStep ./internal/latency/ 200x 3 'cpu-us/step')
{
	echo "## Latency controller CPU, 100 tenants (10 latency-critical with a target, 90 best-effort), 3 runs of 200 steps"
	echo "Each step reads every tenant's settings.bin (when changed) and usage file through the host's readers and writes the status file (getrusage)."
	echo "Target: <= 0.5% of one core at the agent's 1 s interval. With pacing on, the board publisher's 1 ms reads come on top (make gpu-test priority-torch: ctl_cpu_s)."
	echo "$ctl" | sed 's/^BenchmarkControllerStep-[0-9]*//; s/^/  /'
	echo
} >>"$OUT"

log "2/2 crictl create+start, with the plugin vs without ($N containers each, interleaved)"
labenv() { "$REPO/test/lab/containerd.sh" env | sed -n "s/^export $1=//p"; }
CRICTL=$(labenv GPUEXT_LAB_CRICTL)
GPUEXT_LAB_IMAGE=$(labenv GPUEXT_LAB_IMAGE)
A_DIR=$(mktemp -d /tmp/gpuext-bench-a.XXXX)
B_DIR=$(mktemp -d /tmp/gpuext-bench-b.XXXX)
PIN_DIR="/sys/fs/bpf/gpuext-bench"
cleanup() {
	for d in "$A_DIR" "$B_DIR"; do GPUEXT_LAB_DIR="$d" "$REPO/test/lab/containerd.sh" clean >/dev/null 2>&1 || true; rm -rf "$d"; done
	rm -rf "$PIN_DIR"
}
trap cleanup EXIT
rm -rf "$PIN_DIR"
mkdir -p "$A_DIR/containerd/nri/plugins" "$A_DIR/containerd/nri/conf.d"
printf '{"pinDir":"%s","stateDir":"%s/state","devrtDir":"%s/devrt","logFile":"%s/plugin.log","agentSocket":"%s/agent/agent.sock"}\n' \
	"$PIN_DIR" "$A_DIR" "$BIN" "$A_DIR" "$A_DIR" >"$A_DIR/containerd/nri/conf.d/50-gpuext.conf"
install -m 0755 "$BIN/gpuext-nri-plugin" "$A_DIR/containerd/nri/plugins/50-gpuext"
GPUEXT_LAB_DIR="$A_DIR" "$REPO/test/lab/containerd.sh" up
GPUEXT_LAB_DIR="$B_DIR" "$REPO/test/lab/containerd.sh" up

setup_pod() { # dir -> prints pod id; writes pod.json and ctr.json
	local d=$1 cfg
	cfg=$(GPUEXT_LAB_DIR="$d" "$REPO/test/lab/containerd.sh" env | sed -n 's/^export CRI_CONFIG_FILE=//p')
	cat >"$d/pod.json" <<JSON
{"metadata": {"name": "bench", "namespace": "bench", "uid": "bench-$(basename "$d")"},
 "annotations": {"policy.gpuext.io/pod": "batch"},
 "linux": {"cgroup_parent": "/kubepods/besteffort/podbench-$(basename "$d")",
           "security_context": {"namespace_options": {"network": 2}}}}
JSON
	"$CRICTL" --config "$cfg" runp "$d/pod.json"
}
POD_A=$(setup_pod "$A_DIR")
POD_B=$(setup_pod "$B_DIR")
CFG_A=$(GPUEXT_LAB_DIR="$A_DIR" "$REPO/test/lab/containerd.sh" env | sed -n 's/^export CRI_CONFIG_FILE=//p')
CFG_B=$(GPUEXT_LAB_DIR="$B_DIR" "$REPO/test/lab/containerd.sh" env | sed -n 's/^export CRI_CONFIG_FILE=//p')

one() { # cfg pod dir i -> prints ms of create+start
	local cfg=$1 pod=$2 d=$3 i=$4 t0 t1 id
	printf '{"metadata":{"name":"c%d"},"image":{"image":"%s"},"command":["/bin/sleep","600"],"log_path":"c%d.log"}\n' \
		"$i" "$GPUEXT_LAB_IMAGE" "$i" >"$d/c.json"
	t0=$(date +%s%N)
	id=$("$CRICTL" --config "$cfg" create "$pod" "$d/c.json" "$d/pod.json")
	"$CRICTL" --config "$cfg" start "$id" >/dev/null
	t1=$(date +%s%N)
	"$CRICTL" --config "$cfg" rm -f "$id" >/dev/null
	echo $(( (t1 - t0) / 1000 ))
}
: >"$A_DIR/with.txt"; : >"$B_DIR/without.txt"
for i in $(seq "$N"); do
	if (( i % 2 )); then
		one "$CFG_A" "$POD_A" "$A_DIR" "$i" >>"$A_DIR/with.txt"
		one "$CFG_B" "$POD_B" "$B_DIR" "$i" >>"$B_DIR/without.txt"
	else
		one "$CFG_B" "$POD_B" "$B_DIR" "$i" >>"$B_DIR/without.txt"
		one "$CFG_A" "$POD_A" "$A_DIR" "$i" >>"$A_DIR/with.txt"
	fi
	(( i % 10 )) || log "  $i/$N"
done
registered=$(grep -c '"registered tenant cgroup"' "$A_DIR/plugin.log" || true)
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "$A_DIR/with.txt"); mo=$(median "$B_DIR/without.txt")
ratio=$(awk -v a="$mw" -v b="$mo" 'BEGIN {printf "%.3f", a/b}')
# Median of the per-pair ratios: each pair ran back to back, so slow drift of
# this shared machine cancels out.
paste "$A_DIR/with.txt" "$B_DIR/without.txt" | awk '{printf "%.5f\n", $1/$2}' >"$A_DIR/pairs.txt"
pair=$(median "$A_DIR/pairs.txt")
{
	echo "## crictl create+start, real containerd 2.4.2 + runc (median of $N each, interleaved in one run)"
	echo "with plugin:    ${mw} us   (plugin registered $registered containers)"
	echo "without plugin: ${mo} us"
	echo "ratio of medians with/without: ${ratio}; median of per-pair ratios: $(printf '%.3f' "$pair")   (target < 1.05)"
} >>"$OUT"
log "docker run through gpuext-runc + hook + agent vs plain runc"
"$REPO/test/bench-docker.sh"
log "pod start through a real kubelet, with the agent's DaemonSet vs without (test/bench-k8s.sh)"
"$REPO/test/bench-k8s.sh"
cat "$OUT"
