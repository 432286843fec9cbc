#!/usr/bin/env bash
# bench-docker.sh (part of make bench): `docker run` through gpuext-runc and
# the OCI hook (with the host agent running, as on a Docker host) against
# plain runc, one private dockerd, interleaved pairs in one run, as a ratio.
# Appends to bench/results.txt. Not a timed test.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="$REPO/bin"
N="${GPUEXT_BENCH_DOCKER_N:-40}"
OUT="$REPO/bench/results.txt"
log() { printf '[bench] %s\n' "$*" >&2; }

WORK=$(mktemp -d /tmp/gpuext-bench-docker.XXXX)
PIN_DIR="/sys/fs/bpf/gpuext-bench-docker"
export GPUEXT_LAB_DIR="$WORK/lab" GPUEXT_RUNC_WRAPPER="$BIN/gpuext-runc" GPUEXT_CONFIG="$WORK/gpuext.json"
AGENT_PID=""
cleanup() {
	[[ -n "$AGENT_PID" ]] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null || true
	"$REPO/test/lab/dockerd.sh" clean >/dev/null 2>&1 || true
	rm -rf "$WORK" "$PIN_DIR"
}
trap cleanup EXIT
cat >"$GPUEXT_CONFIG" <<JSON
{"pinDir": "$PIN_DIR", "stateDir": "$WORK/state", "devrtDir": "$BIN/devrt", "logFile": "$WORK/gpuext.log",
 "hookPath": "$BIN/gpuext-oci-hook", "agentSocket": "$WORK/agent/agent.sock",
 "dockerDataRoot": "$WORK/lab/docker/data"}
JSON
"$BIN/gpuext-nri-plugin" --nri=false --config "$GPUEXT_CONFIG" 2>"$WORK/agent.stderr" &
AGENT_PID=$!
for _ in $(seq 100); do [[ -S "$WORK/agent/agent.sock" ]] && break; sleep 0.1; done
[[ -S "$WORK/agent/agent.sock" ]] || { echo "bench: agent did not start" >&2; cat "$WORK/agent.stderr" >&2; exit 1; }
"$REPO/test/lab/dockerd.sh" up >/dev/null
IMAGE=$("$REPO/test/lab/dockerd.sh" env | sed -n 's/^export GPUEXT_LAB_IMAGE=//p')
dk() { "$REPO/test/lab/dockerd.sh" docker "$@"; }
one() { # runtime-args... -> prints us of docker run --rm
	local t0 t1
	t0=$(date +%s%N)
	dk run --rm --network none "$@" "$IMAGE" /bin/true >/dev/null
	t1=$(date +%s%N)
	echo $(( (t1 - t0) / 1000 ))
}
one >/dev/null; one --runtime gpuext --label policy.gpuext.io=batch >/dev/null # warm both paths
: >"$WORK/with.txt"; : >"$WORK/without.txt"
for i in $(seq "$N"); do
	if (( i % 2 )); then
		one --runtime gpuext --label policy.gpuext.io=batch >>"$WORK/with.txt"
		one >>"$WORK/without.txt"
	else
		one >>"$WORK/without.txt"
		one --runtime gpuext --label policy.gpuext.io=batch >>"$WORK/with.txt"
	fi
	(( i % 10 )) || log "  docker run $i/$N"
done
admitted=$(grep -c '"admitted container"' "$WORK/gpuext.log" || true)
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "$WORK/with.txt"); mo=$(median "$WORK/without.txt")
ratio=$(awk -v a="$mw" -v b="$mo" 'BEGIN {printf "%.3f", a/b}')
paste "$WORK/with.txt" "$WORK/without.txt" | awk '{printf "%.5f\n", $1/$2}' >"$WORK/pairs.txt"
pair=$(median "$WORK/pairs.txt")
{
	echo
	echo "## docker run --rm, dockerd 20.10: gpuext-runc + OCI hook + agent vs plain runc (median of $N each, interleaved in one run)"
	echo "with gpuext:    ${mw} us   (agent admitted $admitted containers)"
	echo "plain runc:     ${mo} us"
	echo "ratio of medians with/without: ${ratio}; median of per-pair ratios: $(printf '%.3f' "$pair")   (target <= 1.10)"
} >>"$OUT"
