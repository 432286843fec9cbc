#!/usr/bin/env bash
# bench-k8s.sh (part of make bench): pod start latency through a real kubelet
# with the gpuext agent (the chart's DaemonSet, an NRI plugin of the node's
# containerd) against without it, in one run on one single-node cluster
# (test/k8s/cluster.sh). Appends to bench/results.txt. Not a timed test.
#
# A pod start is `kubectl apply` of a host-network busybox pod (with a gpuext
# policy annotation) until `kubectl wait --for=condition=Ready` returns, in
# wall milliseconds; then the pod is deleted. The agent is installed and
# uninstalled between blocks of GPUEXT_BENCH_K8S_N pods, ROUNDS times, so slow
# drift of this shared machine falls on both sides.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="$REPO/bin"
N="${GPUEXT_BENCH_K8S_N:-10}"
ROUNDS="${GPUEXT_BENCH_K8S_ROUNDS:-3}"
OUT="$REPO/bench/results.txt"
export GPUEXT_K8S_DIR="${GPUEXT_BENCH_K8S_DIR:-$REPO/.cache/k8s/bench}"
WORK="$GPUEXT_K8S_DIR/gpuext"
PIN_DIR="/sys/fs/bpf/gpuext-bench-k8s"
CLUSTER="$REPO/test/k8s/cluster.sh"
log() { printf '[bench-k8s] %s\n' "$*" >&2; }
[[ $(id -u) -eq 0 ]] || { echo "bench-k8s: needs root" >&2; exit 1; }
[[ -e "$BIN/gpuext-image.tar" && -e "$BIN/gpuext-image.ref" ]] || { echo "bench-k8s: run make image first" >&2; exit 1; }
IMAGE="$(cat "$BIN/gpuext-image.ref")"

MOUNTED_BPFFS=""
if [[ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != "bpf_fs" ]]; then
	mount -t bpf bpf /sys/fs/bpf
	MOUNTED_BPFFS=1
fi
cleanup() {
	"$CLUSTER" helm uninstall gpuext -n gpuext-system --wait --timeout 1m >/dev/null 2>&1 || true
	"$CLUSTER" down >/dev/null 2>&1 || true
	rm -rf "$PIN_DIR" "$WORK"
	[[ -n "$MOUNTED_BPFFS" ]] && umount /sys/fs/bpf 2>/dev/null || true
}
trap cleanup EXIT

log "starting the cluster"
"$CLUSTER" up >/dev/null
eval "$("$CLUSTER" env)"
k() { "$GPUEXT_K8S_KUBECTL" "$@"; }
"$CLUSTER" ctr images import "$BIN/gpuext-image.tar" >/dev/null
mkdir -p "$WORK"
cat >"$WORK/values.yaml" <<EOF
image: {name: ${IMAGE%:*}, tag: ${IMAGE##*:}, pullPolicy: Never}
nri: {socket: $NRI_SOCKET}
bpffs: {mountPropagation: None}
config:
  pinDir: $PIN_DIR
  stateDir: $WORK/state
  devrtDir: $WORK/devrt
  agentSocket: $WORK/sock/agent.sock
EOF
agent=""
install_agent() {
	[[ -n "$agent" ]] && return
	agent=1
	"$CLUSTER" helm install gpuext "$REPO/deploy/helm/gpuext" -n gpuext-system --create-namespace -f "$WORK/values.yaml" --wait --timeout 3m >/dev/null
	k -n gpuext-system rollout status daemonset/gpuext --timeout 2m >/dev/null
}
registered=0
remove_agent() {
	local n
	[[ -z "$agent" ]] && return
	agent=""
	n=$(k -n gpuext-system logs daemonset/gpuext -c gpuext 2>/dev/null | grep -c 'registered tenant cgroup' || true)
	registered=$((registered + n))
	"$CLUSTER" helm uninstall gpuext -n gpuext-system --wait --timeout 1m >/dev/null
	for _ in $(seq 60); do
		[[ -z "$(k -n gpuext-system get pods -o name 2>/dev/null)" ]] && return
		sleep 1
	done
}
one() { # i -> prints ms from apply to Ready
	local name="bench-$1" t0 t1
	t0=$(date +%s%N)
	k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  annotations: {policy.gpuext.io: batch}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: $GPUEXT_LAB_IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
EOF
	k wait --for=condition=Ready "pod/$name" --timeout=2m >/dev/null
	t1=$(date +%s%N)
	k delete pod "$name" --wait >/dev/null
	echo $(( (t1 - t0) / 1000000 ))
}
: >"$WORK/with.txt"; : >"$WORK/without.txt"
one warmup >/dev/null # the first pod pays for the image's first snapshot
i=0
for r in $(seq "$ROUNDS"); do
	for side in with without; do
		# alternate which side goes first in each round
		if (( r % 2 == 0 )); then side=$([[ $side == with ]] && echo without || echo with); fi
		if [[ $side == with ]]; then install_agent; else remove_agent; fi
		log "round $r/$ROUNDS: $N pods $side the agent"
		for _ in $(seq "$N"); do
			i=$((i + 1))
			one "$i" >>"$WORK/$side.txt"
		done
	done
done
remove_agent
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "$WORK/with.txt"); mo=$(median "$WORK/without.txt")
{
	echo
	echo "## Pod start through a real kubelet v1.37.2 + containerd 2.4 (single node), with the agent's DaemonSet vs without"
	echo "kubectl apply of a host-network pod until kubectl wait Ready, wall ms; $ROUNDS rounds of $N pods on each side, the agent installed/uninstalled between blocks."
	echo "with agent:    median ${mw} ms ($(wc -l <"$WORK/with.txt") pods; the agent logged $registered registrations, its own container's included)"
	echo "without agent: median ${mo} ms ($(wc -l <"$WORK/without.txt") pods)"
	echo "ratio of medians with/without: $(awk -v a="$mw" -v b="$mo" 'BEGIN {printf "%.3f", a/b}')   (target <= 1.05)"
} >>"$OUT"
log "with ${mw} ms, without ${mo} ms"
