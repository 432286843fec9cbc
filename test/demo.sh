#!/usr/bin/env bash
# demo.sh (make demo): real containerd 2.4 + NRI + runc on this machine, the
# gpuext NRI plugin pre-installed in containerd's plugin dir, one pod with two
# labelled containers that ask for different policies and one container with
# a bad annotation; prints the tenant table and what each container really
# saw; then cleans everything up (by pid; unmounts what it mounted, the bpf
# filesystem at /sys/fs/bpf included when the plugin mounted it and nothing
# else is pinned there; removes its cgroups).
# Needs root. `make demo` runs `make deps build` first.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="$REPO/bin"
export GPUEXT_LAB_DIR="${GPUEXT_DEMO_DIR:-$REPO/.cache/demo}"
PIN_DIR="/sys/fs/bpf/gpuext-demo"
STATE_DIR="$GPUEXT_LAB_DIR/state"
PLUGIN_LOG="$GPUEXT_LAB_DIR/gpuext-nri-plugin.log"
LAB="$REPO/test/lab"
t0=$(date +%s)
step() { printf '\n\033[1m[demo %3ss] %s\033[0m\n' "$(( $(date +%s) - t0 ))" "$*"; }

[[ $(id -u) -eq 0 ]] || { echo "demo: needs root (containerd, cgroups, bpffs)" >&2; exit 1; }
for b in gpuext-nri-plugin gpuextctl devrt/libgpuext-devrt.so; do
	[[ -e "$BIN/$b" ]] || { echo "demo: $BIN/$b missing: run 'make build' (make demo does)" >&2; exit 1; }
done

eval "$("$LAB/containerd.sh" env)"
crictl() { "$GPUEXT_LAB_CRICTL" --config "$CRI_CONFIG_FILE" "$@"; }
gpuextctl() { "$BIN/gpuextctl" --config "$GPUEXT_LAB_DIR/gpuext.json" "$@"; }

# The plugin mounts a bpf filesystem when the host has none (a host whose
# PID 1 is not systemd) and logs it: the demo unmounts what was mounted for
# it, unless something else has pinned there since (another user's pins).
bpffs_mounted() { grep -q ' /sys/fs/bpf bpf ' /proc/self/mounts; }
BPFFS_BEFORE=no
bpffs_mounted && BPFFS_BEFORE=yes
unmount_bpffs() {
	[[ $BPFFS_BEFORE == no ]] && bpffs_mounted || return 0
	grep -q '"no bpf filesystem was mounted: mounted one"' "$PLUGIN_LOG" 2>/dev/null || return 0
	# maps.debug and progs.debug are the kernel's own (bpf_preload) in every new bpffs
	local others
	others=$(ls -A /sys/fs/bpf | grep -vxE 'maps\.debug|progs\.debug' || true)
	if [[ -n $others ]]; then
		echo "left /sys/fs/bpf mounted: it holds pins the demo did not make ($(echo $others | cut -c1-80))"
	elif umount /sys/fs/bpf; then
		echo "unmounted the bpf filesystem the plugin mounted at /sys/fs/bpf"
	fi
}

POD_ID=""
cleanup() {
	step "cleaning up: pod, containerd (by pid), mounts, cgroups, pinned registry"
	[[ -n "$POD_ID" ]] && { crictl stopp "$POD_ID" >/dev/null 2>&1 || true; crictl rmp -f "$POD_ID" >/dev/null 2>&1 || true; }
	"$LAB/containerd.sh" down || true
	rm -rf "$PIN_DIR" "$STATE_DIR"
	unmount_bpffs
	echo "done in $(( $(date +%s) - t0 ))s"
}
trap cleanup EXIT

step "installing the gpuext NRI plugin as a pre-installed plugin (50-gpuext) with its config"
mkdir -p "$NRI_PLUGIN_DIR" "$NRI_PLUGIN_CONFIG_DIR" "$STATE_DIR"
rm -rf "$PIN_DIR"
cat >"$GPUEXT_LAB_DIR/gpuext.json" <<JSON
{
  "failMode": "fail-open",
  "pinDir": "$PIN_DIR",
  "stateDir": "$STATE_DIR",
  "devrtDir": "$BIN/devrt",
  "logFile": "$PLUGIN_LOG",
  "agentSocket": "$GPUEXT_LAB_DIR/agent/agent.sock"
}
JSON
cp "$GPUEXT_LAB_DIR/gpuext.json" "$NRI_PLUGIN_CONFIG_DIR/50-gpuext.conf"
install -m 0755 "$BIN/gpuext-nri-plugin" "$NRI_PLUGIN_DIR/50-gpuext"
: >"$PLUGIN_LOG"
cat "$GPUEXT_LAB_DIR/gpuext.json"

step "starting a private containerd 2.4 with CRI + NRI (runc, cgroupfs)"
"$LAB/containerd.sh" up
for _ in $(seq 50); do grep -q '"synchronized"' "$PLUGIN_LOG" 2>/dev/null && break; sleep 0.2; done
grep -q '"synchronized"' "$PLUGIN_LOG" || { echo "demo: plugin did not start; log:"; cat "$PLUGIN_LOG"; exit 1; }
echo "plugin connected and synchronized (log: $PLUGIN_LOG)"

step "creating pod 'gpu-demo' through CRI"
UID_="demo-$(date +%s)"
cat >"$GPUEXT_LAB_DIR/pod.json" <<JSON
{
  "metadata": {"name": "gpu-demo", "namespace": "ml", "uid": "$UID_"},
  "log_directory": "$GPUEXT_LAB_POD_LOG_DIR/$UID_",
  "annotations": {"quota.gpuext.io/container.trainer": "8GiB"},
  "linux": {"cgroup_parent": "/kubepods/besteffort/pod$UID_",
            "security_context": {"namespace_options": {"network": 2}}}
}
JSON
POD_ID=$(crictl runp "$GPUEXT_LAB_DIR/pod.json")
echo "pod $POD_ID, annotated:"
echo "  quota.gpuext.io/container.trainer: 8GiB   <- the trainer's quota: its label asks for the 'quota' policy, this pod annotation sizes it"

# A CUDA-style app for the containers: this machine has no GPU, so it runs
# against the fake libcuda built by devrt/build.sh (labelled as such below);
# the real-GPU runs of the same library are `make gpu-test` on the H200.
PAYLOAD="$GPUEXT_LAB_DIR/payload"
rm -rf "$PAYLOAD" && mkdir -p "$PAYLOAD"
cp "$BIN/devrt-build/fake/app_procaddr" "$BIN/devrt-build/fake/libcuda.so.1" "$PAYLOAD/"
for bin in "$BIN/devrt-build/fake/app_procaddr" "$BIN/devrt/libgpuext-devrt.so"; do
	for f in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do cp "$f" "$PAYLOAD/"; done
done
APP='/payload/ld-linux-x86-64.so.2 --library-path /payload /payload/app_procaddr'
SCRIPT='echo "== env"; env | grep -E "^(GPUEXT_|LD_PRELOAD)" | sort; echo "== mounts"; grep /run/gpuext /proc/self/mounts | cut -d" " -f2,4 | cut -d, -f1; echo "== tenant config"; cat /run/gpuext/tenant/config.json; echo "== CUDA app (fake libcuda): allocate 6GiB, 4GiB, then ask cuMemGetInfo"; '"$APP"' alloc 6GiB alloc 4GiB info; echo "== end"; exec sleep 600'
declare -A CTR
start_ctr() { # name labels-json annotations-json
	cat >"$GPUEXT_LAB_DIR/$1.json" <<JSON
{
  "metadata": {"name": "$1"},
  "image": {"image": "$GPUEXT_LAB_IMAGE"},
  "command": ["/bin/sh", "-c", $(printf '%s' "$SCRIPT" | sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$/"/')],
  "labels": $2,
  "annotations": $3,
  "mounts": [{"container_path": "/payload", "host_path": "$PAYLOAD", "readonly": true}],
  "log_path": "$1.log"
}
JSON
	local id
	id=$(crictl create "$POD_ID" "$GPUEXT_LAB_DIR/$1.json" "$GPUEXT_LAB_DIR/pod.json")
	crictl start "$id" >/dev/null
	CTR[$1]=$id
	printf '  %-10s %s  labels=%s annotations=%s\n' "$1" "${id:0:12}" "$2" "$3"
}
step "starting three containers"
start_ctr inference '{"policy.gpuext.io": "latency-critical"}' '{}'
start_ctr trainer '{"policy.gpuext.io": "quota"}' '{}'
start_ctr broken '{}' '{"policy.gpuext.io": "turbo"}'

for n in inference trainer broken; do
	for _ in $(seq 50); do crictl logs "${CTR[$n]}" 2>/dev/null | grep -q '== end' && break; sleep 0.2; done
done

step "tenant table (gpuextctl tenants; -o wide adds the container id, runtime, cgroup, refused allocations)"
gpuextctl tenants --pin-dir "$PIN_DIR"
echo "MEM-NOW and MEM-PEAK come from the device runtime (here over the fake libcuda): each app allocated, then"
echo "exited, so its tenant holds 0 now; MEM-PEAK is the most it held (the trainer's 4GiB past its 8GiB quota was refused)."
echo "LATENCY is the agent's latency controller: the inference container's policy asks for p99 at most 1.5x its own"
echo "p99 alone, judged once it has served requests with no best-effort work on the node (docs/priority-control.md)."

for n in inference trainer broken; do
	step "what container '$n' saw"
	crictl logs "${CTR[$n]}" 2>&1 | sed '/== end/d; s/^/  /'
done

step "the bad annotation, as the plugin logged it (fail-open: default policy)"
grep '"bad gpu policy request' "$PLUGIN_LOG" | sed 's/^/  /'

step "policy catalog (gpuextctl policies)"
gpuextctl policies

step "removing the pod: its tenants leave the registry"
crictl stopp "$POD_ID" >/dev/null && crictl rmp "$POD_ID" >/dev/null && POD_ID=""
gpuextctl tenants --pin-dir "$PIN_DIR"
