#!/usr/bin/env bash
# gpu-node.sh (make gpu-node): gpuext on a real GPU node, end to end.
#
# Runs on the GPU machine (root, a GPU, no Go, nothing to pull). Brings the
# node up as a platform engineer would, from what `make gpu-node-prep` built
# here (out/gpu-node: containerd 2.4, ctr, crictl, runc from Debian, NVIDIA's
# nvidia-ctk and nvidia-cdi-hook, the gpuext binaries, the lab images):
#   - the GPU as CDI: `nvidia-ctk cdi generate` over the driver's root
#   - containerd 2.4 with CRI, NRI and CDI on, runc
#   - the MPS control daemon, as docs/gpu-node.md tells operators
#   - the gpuext agent, started with its systemd unit's command line
#     (deploy/systemd/gpuext-nri.service), config in /etc/gpuext
# then creates pods and containers through CRI (crictl) from annotations,
# running the host's Python and PyTorch mounted read-only, and prints one
# line per check:  PASS <check>  or  FAIL <check>: <why>,  INFO lines with
# figures, and "N passed, N failed" at the end.
#
# Sections (GPUEXT_NODE_SECTIONS, default all): quota memguard probes
# restart overhead priority. Results and logs go to $OUT (default $W/out).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
NODE="${GPUEXT_NODE_PREP:-$REPO/out/gpu-node}"
W="${GPUEXT_NODE_WORK:-/tmp/gpuext-node}"
OUT="${OUT:-$W/out}"
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
info() { echo "INFO $*"; }
log() { printf '[gpu-node %4ss] %s\n' "$SECONDS" "$*"; }
want() { [[ " ${GPUEXT_NODE_SECTIONS:-quota memguard probes restart overhead priority} " == *" $1 "* ]]; }
GiB=$((1 << 30))

[[ $(id -u) == 0 ]] || { echo "gpu-node: needs root" >&2; exit 1; }
[[ -f $NODE/bin.tar.xz ]] || { echo "gpu-node: $NODE/bin.tar.xz missing: run 'make gpu-node-prep' here and carry out/gpu-node" >&2; exit 1; }
# A run's node is taken down at its end, and before a new run when one was
# left up (a killed run): containerd and its containers, the agent, MPS.
teardown() {
	[[ -x $W/bin/containerd ]] || return 0
	pkill -TERM -f "^$W/bin/gpuext-nri-plugin|^/usr/local/bin/gpuext-nri-plugin" 2>/dev/null
	GPUEXT_LAB_BIN="$W/bin" GPUEXT_LAB_DIR="$W/lab" GPUEXT_LAB_RUNC="$W/root/usr/sbin/runc" PATH="$W/bin:$PATH" \
		"$REPO/test/lab/containerd.sh" down >/dev/null 2>&1
	echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps nvidia-cuda-mps-control >/dev/null 2>&1
	return 0
}
teardown
rm -rf "$W" && mkdir -p "$W/bin" "$W/root" "$OUT"
echo "[gpu-node] $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'); kernel $(uname -r)"

# ---- 0. What the node is made of (from out/gpu-node) -------------------------
tar -xJf "$NODE/bin.tar.xz" -C "$W/bin"
for d in "$NODE"/*.deb; do dpkg -x "$d" "$W/root"; done
export PATH="$W/bin:$W/root/usr/sbin:$W/root/usr/bin:$PATH"
export GPUEXT_LAB_BIN="$W/bin" GPUEXT_LAB_DIR="$W/lab" GPUEXT_LAB_RUNC="$W/root/usr/sbin/runc"
mkdir -p "$W/lab/images" && cp "$NODE"/images/*.tar "$W/lab/images/"
info "runc: $("$GPUEXT_LAB_RUNC" --version 2>&1 | head -1); containerd: $(containerd --version 2>&1)"
# The host's Python with PyTorch; the containers mount its tree read-only.
PY=$(command -v python3)
PYREAL=$(readlink -f "$PY")
info "python: $PY -> $PYREAL ($("$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1))"
HOSTMOUNTS=(/usr /opt)
case $PYREAL in /usr/* | /opt/*) ;; *) HOSTMOUNTS+=("$(cut -d/ -f1-3 <<<"$PYREAL")") ;; esac
case $PY in /usr/* | /opt/*) ;; *) HOSTMOUNTS+=("$(cut -d/ -f1-3 <<<"$PY")") ;; esac

# The device runtime, built here with gcc, installed where the config says.
if bash "$REPO/devrt/build.sh" "$W/devrt-build" >"$OUT/build-devrt.log" 2>&1; then
	install -D -m 0755 "$W/devrt-build/libgpuext-devrt.so" /opt/gpuext/devrt/libgpuext-devrt.so
else
	bad build-devrt "see build-devrt.log"; tail -5 "$OUT/build-devrt.log"
fi
nvcc -O2 -arch=sm_90 -o "$W/vecadd" "$REPO/test/gpu/vecadd.cu" >"$OUT/build-vecadd.log" 2>&1 || bad build-vecadd "nvcc failed"

# ---- 1. The GPU as CDI: NVIDIA's spec, generated on this node -----------------
DRIVER_ROOT=${GPUEXT_NODE_DRIVER_ROOT:-/usr/local/nvidia}
[[ -d $DRIVER_ROOT ]] || DRIVER_ROOT=/
eval "$("$REPO/test/lab/containerd.sh" env)"
mkdir -p "$GPUEXT_LAB_CDI_DIR"
if nvidia-ctk cdi generate --driver-root "$DRIVER_ROOT" --dev-root / \
	--nvidia-cdi-hook-path "$W/bin/nvidia-cdi-hook" --output "$GPUEXT_LAB_CDI_DIR/nvidia.yaml" >"$OUT/cdi-generate.log" 2>&1; then
	cp "$GPUEXT_LAB_CDI_DIR/nvidia.yaml" "$OUT/cdi-nvidia.yaml"
	nvidia-ctk cdi list --spec-dir "$GPUEXT_LAB_CDI_DIR" >"$OUT/cdi-list.txt" 2>&1
	info "cdi devices: $(grep -v level= "$OUT/cdi-list.txt" | tr '\n' ' ')"
	if grep -qx 'nvidia.com/gpu=0' "$OUT/cdi-list.txt"; then ok cdi-spec-generated; else bad cdi-spec-generated "no nvidia.com/gpu=0 in: $(head -c 300 "$OUT/cdi-list.txt")"; fi
else
	bad cdi-spec-generated "nvidia-ctk cdi generate failed: $(tail -3 "$OUT/cdi-generate.log" | tr '\n' ' ')"
fi

# ---- 2. containerd 2.4 with CRI + NRI + CDI, runc -----------------------------
"$REPO/test/lab/containerd.sh" up >"$OUT/containerd-up.log" 2>&1 || { bad containerd-up "$(tail -5 "$OUT/containerd-up.log" | tr '\n' ' ')"; }
crictl() { "$GPUEXT_LAB_CRICTL" --config "$CRI_CONFIG_FILE" "$@"; }
ctr() { "$GPUEXT_LAB_CTR" --address "$CONTAINERD_ADDRESS" --namespace k8s.io "$@"; }
HOSTFS_IMAGE=localhost/gpuext-hostfs:lab
ctr images import "$W/lab/images/hostfs-oci.tar" >"$OUT/import-hostfs.log" 2>&1 || bad import-hostfs "$(tail -3 "$OUT/import-hostfs.log")"
for _ in $(seq 50); do crictl inspecti "$HOSTFS_IMAGE" >/dev/null 2>&1 && break; sleep 0.2; done

# ---- 3. MPS, as operators start it (docs/gpu-node.md) --------------------------
MPS_PIPE=/tmp/nvidia-mps MPS_LOG=/var/log/nvidia-mps
mkdir -p "$MPS_PIPE" "$MPS_LOG"
if command -v nvidia-cuda-mps-control >/dev/null; then
	CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE CUDA_MPS_LOG_DIRECTORY=$MPS_LOG nvidia-cuda-mps-control -d
	sleep 0.5
fi
mps_stop() { echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE nvidia-cuda-mps-control >/dev/null 2>&1; sleep 1; }

# ---- 4. The agent: its config and its systemd unit's command line -------------
mkdir -p /etc/gpuext /var/log/gpuext
AGENT_LOG=/var/log/gpuext/agent.log
agent_config() { # [nomps]: the node's config; nomps leaves MPS out (the overhead section's third mode)
	local mps=""
	[[ ${1:-} == nomps ]] || mps=$(printf ',\n  "mpsPipeDirectory": "%s",\n  "mpsShmDirectory": "/dev/shm"' "$MPS_PIPE")
	cat >/etc/gpuext/config.json <<JSON
{
  "failMode": "fail-open",
  "logFile": "$AGENT_LOG",
  "metricsAddress": "127.0.0.1:9464"$mps
}
JSON
}
agent_config
cp /etc/gpuext/config.json "$OUT/agent-config.json"
export GPUEXT_CONFIG=/etc/gpuext/config.json # what gpuextctl reads
for b in gpuext-nri-plugin gpuextctl gpuext-gpuview; do install -m 0755 "$W/bin/$b" /usr/local/bin/$b; done
UNIT="$REPO/deploy/systemd/gpuext-nri.service"
EXEC=$(sed -n 's/^ExecStart=//p' "$UNIT")
AGENT_PID=""
agent_start() {
	# shellcheck disable=SC2086 # the unit's command line, split as systemd does (no quotes in it)
	setsid $EXEC --socket "$NRI_SOCKET" </dev/null >>"$W/agent.stderr" 2>&1 &
	AGENT_PID=$!
	for _ in $(seq 100); do grep -q '"synchronized"' "$AGENT_LOG" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}
: >"$AGENT_LOG"
if agent_start; then ok agent-started; else bad agent-started "no 'synchronized' in $AGENT_LOG: $(tail -3 "$AGENT_LOG" "$W/agent.stderr" | tr '\n' ' ')"; fi
info "agent: $EXEC (pid $AGENT_PID)"

# ---- helpers: pods and containers through CRI ---------------------------------
POD_LOGS="$GPUEXT_LAB_POD_LOG_DIR"
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
# pod NAME -> pod sandbox id (its config in $W/pods/NAME.json)
pod() {
	local name=$1 uid="gn-$1-$RANDOM$RANDOM"
	mkdir -p "$W/pods"
	cat >"$W/pods/$name.json" <<JSON
{"metadata": {"name": "$name", "namespace": "gpu-node", "uid": "$uid"},
 "log_directory": "$POD_LOGS/$uid",
 "linux": {"cgroup_parent": "/kubepods/besteffort/pod$uid", "security_context": {"namespace_options": {"network": 2}}}}
JSON
	local id
	id=$(crictl runp "$W/pods/$name.json") || return 1
	cp "$W/pods/$name.json" "$W/pods/$id.json" # crictl create wants the pod's config again
	echo "$id"
}
# ctr_create POD NAME ANNOTATIONS-JSON RESDIR CMD... -> container id (created, not started)
# The container: the host's /usr and /opt read-only, this repo's test/
# at /gpuext-test, RESDIR at /res, GPU 0 by its CDI name.
CDI_GPU=${GPUEXT_NODE_CDI:-nvidia.com/gpu=0}
ctr_create() {
	local p=$1 name=$2 ann=$3 res=$4; shift 4
	local cmd="" a mounts=""
	for a in "$@"; do cmd+="${cmd:+, }$(json_str "$a")"; done
	for a in "${HOSTMOUNTS[@]}"; do mounts+="{\"container_path\": \"$a\", \"host_path\": \"$a\", \"readonly\": true}, "; done
	mkdir -p "$res"
	cat >"$W/pods/$p-$name.json" <<JSON
{"metadata": {"name": "$name"},
 "image": {"image": "$HOSTFS_IMAGE"},
 "command": [$cmd],
 "envs": [{"key": "PYTHONUNBUFFERED", "value": "1"}, {"key": "HOME", "value": "/tmp"},
          {"key": "PATH", "value": "$(dirname "$PY"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}],
 "annotations": $ann,
 "CDI_devices": [{"name": "$CDI_GPU"}],
 "mounts": [$mounts {"container_path": "/gpuext-test", "host_path": "$REPO/test", "readonly": true},
            {"container_path": "/vecadd", "host_path": "$W/vecadd", "readonly": true},
            {"container_path": "/res", "host_path": "$res"}${CTR_EXTRA_MOUNTS:-}],
 "log_path": "$name.log"}
JSON
	crictl create "$p" "$W/pods/$p-$name.json" "$W/pods/$p.json"
}
# run_ctr POD NAME ANN RESDIR CMD...: create, start; prints the id
run_ctr() {
	local id
	id=$(ctr_create "$@") || return 1
	crictl start "$id" >/dev/null || return 1
	echo "$id"
}
clogs() { crictl logs "$1" 2>&1; }
cstate() { crictl inspect -o go-template --template '{{.status.state}}' "$1" 2>/dev/null; }
wait_log() { # ID PATTERN SECONDS: until the container printed PATTERN; fails at once when it exited without
	local i
	for i in $(seq $(($3 * 5))); do
		clogs "$1" | grep -q "$2" && return 0
		[[ $(cstate "$1") == CONTAINER_EXITED ]] && { clogs "$1" | grep -q "$2"; return; }
		sleep 0.2
	done
	return 1
}
wait_exit() { # ID SECONDS
	local i
	for i in $(seq $(($2 * 5))); do [[ $(cstate "$1") == CONTAINER_EXITED ]] && return 0; sleep 0.2; done
	return 1
}
tenants_json() { gpuextctl tenants --json 2>&1; }
metrics() { python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode())' 2>&1; }
field() { # JSON-FILE CONTAINER-ID PATH: a field of gpuextctl tenants --json's row for the container
	python3 -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r.get("container", "").startswith(sys.argv[2][:12])]
r = rows[0] if rows else {}
for k in sys.argv[3].split("."):
    r = r.get(k) if isinstance(r, dict) else None
print("" if r is None else r)' "$@" 2>/dev/null
}

# ---- 5. quota -------------------------------------------------------------------
Q=$((4 * GiB))
QID="" PID_PROBE=""
if want quota || want restart; then
	log "quota: a container with a 4GiB quota (policy quota, quota.gpuext.io: 4GiB)"
	QPOD=$(pod quota)
	QID=$(run_ctr "$QPOD" trainer '{"policy.gpuext.io": "quota", "quota.gpuext.io": "4GiB"}' "$W/res/quota" \
		python3 /gpuext-test/gpu-node/node_check.py quota "$Q" /res)
	if [[ -z $QID ]] || ! wait_log "$QID" '^holding' 180; then
		bad quota-container "no 'holding' from the container: $(clogs "$QID" | tail -5 | tr '\n' ' ')"
		crictl inspect "$QID" >"$OUT/quota-inspect.json" 2>&1
	fi
	clogs "$QID" >"$OUT/quota-container.txt"
	Qlog=$OUT/quota-container.txt
	devs=$(awk '$1 == "devices" {print $2}' "$Qlog")
	tot=$(awk '$1 == "mem_get_info" {print $3}' "$Qlog")
	smi=$(awk '$1 == "nvidia_smi_total_mib" {print $2}' "$Qlog")
	over=$(awk '$1 == "over_quota" {print $2, $3}' "$Qlog")
	loss=$(awk '$1 == "loss" {print $2}' "$Qlog")
	info "quota container: devices=$devs mem_get_info_total=$tot nvidia_smi_total_mib=$smi over_quota='$over' loss=$loss"
	if [[ $devs == 1 ]]; then ok quota-one-gpu; else bad quota-one-gpu "torch sees '$devs' GPUs"; fi
	if [[ $tot == "$Q" ]]; then ok quota-mem-get-info; else bad quota-mem-get-info "torch.cuda.mem_get_info() total '$tot', want $Q"; fi
	if [[ $smi == 4096 ]]; then ok quota-nvidia-smi; else bad quota-nvidia-smi "nvidia-smi memory.total '$smi' MiB, want 4096"; fi
	if [[ $over == OutOfMemoryError* ]] && ((${over#* } <= Q)); then ok quota-over-oom; else bad quota-over-oom "allocating past the quota gave '$over'"; fi
	host_loss=$("$PY" "$REPO/test/gpu-node/node_check.py" train 2>&1 | awk '$1 == "loss" {print $2}')
	if [[ -n $loss && $loss == "$host_loss" ]]; then ok "quota-training-same-loss ($loss)"; else bad quota-training-same-loss "container '$loss', host '$host_loss'"; fi
	# what the operator sees: the tenant table and the metrics endpoint
	tenants_json >"$OUT/quota-tenants.json"
	gpuextctl tenants >"$OUT/quota-tenants.txt" 2>&1
	sleep 6 # the NVML view is cached for 5 s
	metrics >"$OUT/quota-metrics.txt"
	used=$(field "$OUT/quota-tenants.json" "$QID" usage.UsedBytes)
	tq=$(field "$OUT/quota-tenants.json" "$QID" quotaBytes)
	tid=$(field "$OUT/quota-tenants.json" "$QID" tenant)
	info "tenant $tid quota=$tq devrt used=$used"
	if [[ $tq == "$Q" && -n $used ]] && ((used >= GiB && used < Q)); then ok "quota-tenant-table (tenant $tid, ${used} bytes used)"; else bad quota-tenant-table "tenant row for ${QID:0:12}: quota '$tq' used '$used' (quota-tenants.json)"; fi
	nv=$(awk -v t="tenant=\"$tid\"" '/^gpuext_tenant_nvml_memory_used_bytes/ && index($0, t) {s += $NF} END {print s + 0}' "$OUT/quota-metrics.txt")
	dv=$(awk -v t="tenant=\"$tid\"" '/^gpuext_tenant_device_memory_used_bytes/ && index($0, t) {s += $NF} END {print s + 0}' "$OUT/quota-metrics.txt")
	up=$(awk '/^gpuext_nvml_up/ {print $NF}' "$OUT/quota-metrics.txt")
	info "metrics tenant $tid: device_memory_used_bytes=$dv nvml_memory_used_bytes=$nv nvml_up=$up"
	grep -E '^gpuext_(tenant_(nvml_memory_used|device_memory_used|device_memory_peak)_bytes|nvml_up)' "$OUT/quota-metrics.txt" | grep -E "tenant=\"$tid\"|nvml_up" | sed 's/^/INFO metrics /'
	if [[ ${dv%.*} -ge $GiB ]]; then ok quota-metrics-devrt; else bad quota-metrics-devrt "gpuext_tenant_device_memory_used_bytes for tenant $tid: '$dv'"; fi
	if [[ $up == 1 ]] && awk -v v="$nv" -v g="$GiB" 'BEGIN {exit !(v + 0 >= g)}'; then ok quota-metrics-nvml; else bad quota-metrics-nvml "nvml_up=$up gpuext_tenant_nvml_memory_used_bytes for tenant $tid: '$nv'"; fi
fi

# ---- 5b. memguard: a container that unsets LD_PRELOAD is held by the agent ------
# The device runtime is bypassed; the agent's memory guard reads NVML and
# stops the process that took its tenant past the quota. Its termination
# message (a file mounted where the kubelet mounts one) says why. A
# container of another tenant beside it keeps its memory.
if want memguard; then
	log "memguard: a 4GiB-quota container without LD_PRELOAD takes 8GiB; a bystander holds 3GiB"
	MPOD=$(pod memguard)
	grab='import os, sys, time, torch
a = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device="cuda")
b = torch.empty(int(sys.argv[2]) << 30, dtype=torch.uint8, device="cuda") if int(sys.argv[2]) else None
torch.cuda.synchronize()
print("held", time.time(), flush=True)
time.sleep(600)'
	BY=$(run_ctr "$MPOD" bystander '{"policy.gpuext.io": "quota", "quota.gpuext.io": "4GiB"}' "$W/res/mg-by" python3 -c "$grab" 3 0)
	wait_log "$BY" '^held' 120 || bad memguard-bystander-start "$(clogs "$BY" | tail -3 | tr '\n' ' ')"
	TERMLOG=$W/res/mg-termination-log; : >"$TERMLOG"
	CTR_EXTRA_MOUNTS=", {\"container_path\": \"/dev/termination-log\", \"host_path\": \"$TERMLOG\"}"
	ES=$(run_ctr "$MPOD" escaper '{"policy.gpuext.io": "quota", "quota.gpuext.io": "4GiB"}' "$W/res/mg-es" env -u LD_PRELOAD python3 -c "$grab" 4 4)
	CTR_EXTRA_MOUNTS=""
	if wait_log "$ES" '^held' 120 && wait_exit "$ES" 30; then
		held_at=$(clogs "$ES" | awk '$1 == "held" {print $2}')
		fin=$(crictl inspect -o go-template --template '{{.status.finishedAt}}' "$ES" 2>/dev/null)
		code=$(crictl inspect -o go-template --template '{{.status.exitCode}}' "$ES" 2>/dev/null)
		gap=$(python3 -c 'import sys, datetime; f = datetime.datetime.fromisoformat(sys.argv[2].replace("Z", "+00:00")).timestamp(); print(round((f - float(sys.argv[1])) * 1000))' "$held_at" "$fin" 2>/dev/null)
		info "memguard escaper: exit $code, stopped ${gap:-?} ms after it held 8GiB; termination message: $(head -c 300 "$TERMLOG")"
		if [[ $code == 137 ]] && grep -q 'gpuext memory guard' "$TERMLOG"; then ok "memguard-container-stopped (exit 137, ${gap} ms after the overrun)"; else bad memguard-container-stopped "exit '$code', message '$(head -c 200 "$TERMLOG")'"; fi
	else
		bad memguard-container-stopped "the escaper did not hold 8GiB and stop: state $(cstate "$ES"): $(clogs "$ES" | tail -3 | tr '\n' ' ')"
	fi
	sleep 2
	if [[ $(cstate "$BY") == CONTAINER_RUNNING ]]; then ok memguard-bystander-running; else bad memguard-bystander-running "state $(cstate "$BY"): $(clogs "$BY" | tail -3 | tr '\n' ' ')"; fi
	grep 'GPU memory quota' "$AGENT_LOG" | cut -c1-500 >"$OUT/memguard-agent-lines.txt"
	metrics | grep -E '^gpuext_memory_guard' | sed 's/^/INFO metrics /'
	crictl stopp "$MPOD" >/dev/null 2>&1; crictl rmp -f "$MPOD" >/dev/null 2>&1
fi

# ---- 6. probes --------------------------------------------------------------------
if want probes || want restart; then
	log "probes: launch-count,launch-stats on a PTX kernel; a PyTorch container observed host-side"
	PPOD=$(pod probes)
	PID_PROBE=$(run_ctr "$PPOD" vecadd '{"probes.gpuext.io": "launch-count,launch-stats"}' "$W/res/probes" \
		sh -c '/vecadd 1048576 10; echo vecadd-done; while [ ! -e /res/release ]; do sleep 0.2; done; /vecadd 1048576 5; echo vecadd-done2; sleep 600')
	wait_log "$PID_PROBE" vecadd-done 120 || bad probes-container "$(clogs "$PID_PROBE" | tail -5 | tr '\n' ' ')"
	gpuextctl probes --json >"$OUT/probes.json" 2>&1
	gpuextctl probes >"$OUT/probes.txt" 2>&1
	ptid=$(field "$(tenants_json >"$W/t.json"; echo "$W/t.json")" "$PID_PROBE" tenant)
	pf() { python3 -c '
import json, sys
rows = {r["tenant"]: r for r in json.load(open(sys.argv[1]))}
r = rows.get(int(sys.argv[2] or 0), {})
for k in sys.argv[3].split("."):
    r = r.get(k) if isinstance(r, dict) else None
print("" if r is None else r)' "$1" "$ptid" "$2" 2>/dev/null; }
	l=$(pf "$OUT/probes.json" launchesBy.device) b=$(pf "$OUT/probes.json" blocksBy.device)
	info "probes tenant $ptid: device launches=$l blocks=$b (want 20, $((4096 * 20)))"
	if [[ $l == 20 && $b == $((4096 * 20)) ]]; then ok probes-count-exact; else bad probes-count-exact "launches '$l' blocks '$b' want 20 / $((4096 * 20)) (probes.json)"; fi
	if want probes; then
		TPOD=$(pod torchprobes)
		TID=$(run_ctr "$TPOD" torch '{"probes.gpuext.io": "launch-count"}' "$W/res/torchprobes" python3 /gpuext-test/gpu-node/node_check.py launches 500)
		wait_exit "$TID" 180
		clogs "$TID" >"$OUT/probes-torch.txt"
		gpuextctl probes --json >"$OUT/probes-torch.json" 2>&1
		ttid=$(field "$(tenants_json >"$W/t.json"; echo "$W/t.json")" "$TID" tenant)
		hl=$(ptid=$ttid pf "$OUT/probes-torch.json" launchesBy.host)
		info "probes torch tenant $ttid: host-side launches=$hl (the app made 500 add_ kernels)"
		if [[ -n $hl ]] && ((hl >= 500)); then ok "probes-torch-host-launches ($hl)"; else bad probes-torch-host-launches "host-side launches '$hl' (probes-torch.json)"; fi
		crictl rm -f "$TID" >/dev/null 2>&1; crictl stopp "$TPOD" >/dev/null 2>&1; crictl rmp -f "$TPOD" >/dev/null 2>&1
	fi
fi

# ---- 7. restart: kill -9 the agent while containers run --------------------------
if want restart && [[ -n $QID && -n $PID_PROBE ]]; then
	log "restart: kill -9 the agent with two tenants running"
	tenants_json >"$OUT/restart-before.json"
	kill -9 "$AGENT_PID"; sleep 1
	: >>"$AGENT_LOG"
	if agent_start; then ok agent-restarted; else bad agent-restarted "$(tail -3 "$AGENT_LOG" | tr '\n' ' ')"; fi
	tenants_json >"$OUT/restart-after.json"
	touch "$W/res/quota/release" "$W/res/probes/release"
	wait_log "$QID" '^done' 120
	wait_log "$PID_PROBE" vecadd-done2 120
	clogs "$QID" >"$OUT/quota-container.txt"
	after=$(awk '$1 == "over_quota_after" {print $2}' "$OUT/quota-container.txt")
	if [[ $after == OutOfMemoryError ]]; then ok restart-quota-holds; else bad restart-quota-holds "past the quota after the restart: '$after'"; fi
	gpuextctl probes --json >"$OUT/probes-after.json" 2>&1
	l=$(pf "$OUT/probes-after.json" launchesBy.device)
	if [[ $l == 30 ]]; then ok restart-probes-hold; else bad restart-probes-hold "device launches after the restart '$l', want 30"; fi
	# the running containers' tenants, before and after (an exited container's goes at Synchronize)
	crictl ps -q --no-trunc >"$W/running.txt"
	same=$(python3 -c '
import json, sys
run = set(open(sys.argv[3]).read().split())
k = lambda f: sorted((r["tenant"], r["container"], r["policy"]) for r in json.load(open(f)) if r.get("container") in run)
a, b = k(sys.argv[1]), k(sys.argv[2])
print("yes" if a == b and len(a) == 2 else "no: %s / %s" % (a, b))' "$OUT/restart-before.json" "$OUT/restart-after.json" "$W/running.txt" 2>&1)
	if [[ $same == yes ]]; then ok restart-registry-matches; else bad restart-registry-matches "tenants before and after the restart differ (restart-*.json): $same"; fi
	for c in "$QID" "$PID_PROBE"; do crictl stop --timeout 2 "$c" >/dev/null 2>&1; crictl rm -f "$c" >/dev/null 2>&1; done
	for p in "$QPOD" "$PPOD"; do crictl stopp "$p" >/dev/null 2>&1; crictl rmp -f "$p" >/dev/null 2>&1; done
	sleep 1
	left=$(tenants_json | python3 -c 'import json,sys; print(len([r for r in json.load(sys.stdin) if r.get("container")]))' 2>&1)
	acct=$(find /run/gpuext/acct -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	if [[ $left == 0 ]]; then ok "restart-nothing-leaked (acct dirs left: $acct)"; else bad restart-nothing-leaked "$left tenants with containers left after every pod was removed"; fi
fi

# ---- 8. overhead: create+start, and frameworks' own throughput ---------------------
if want overhead; then
	log "overhead: container create+start and framework throughput, with the agent against without"
	ROUNDS=${GPUEXT_NODE_ROUNDS:-3}
	OPOD=$(pod overhead)
	cs_once() { # -> ms of crictl create + start of a container that exits at once
		local t0 id
		t0=$(date +%s%N)
		id=$(run_ctr "$OPOD" "cs$RANDOM" '{}' "$W/res/cs" /usr/bin/true) || { echo 0; return; }
		echo $((($(date +%s%N) - t0) / 1000000))
		crictl rm -f "$id" >/dev/null 2>&1
	}
	bench_once() { # ROLE -> the figure the container printed
		local id
		id=$(run_ctr "$OPOD" "b$RANDOM" '{}' "$W/res/b" python3 /gpuext-test/gpu-node/node_check.py "$1" "${GPUEXT_NODE_BENCH_S:-15}")
		wait_exit "$id" 300
		clogs "$id" | awk '$1 ~ /_per_s$/ {print $2}'
		crictl rm -f "$id" >/dev/null 2>&1
	}
	agent_off() { kill -TERM "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; sleep 1; }
	# modes: on (the node's config: MPS client), off (agent stopped: no
	# tenant), nomps (the agent without mpsPipeDirectory: the interposer alone)
	read -r -a OMODES <<<"${GPUEXT_NODE_OVERHEAD_MODES:-on off}"
	cur=on
	for r in $(seq "$ROUNDS"); do
		for k in "${!OMODES[@]}"; do
			# interleave: each round starts one mode later
			m=${OMODES[$(((k + r - 1) % ${#OMODES[@]}))]}
			if [[ $m == off ]]; then agent_off
			elif [[ $m != "$cur" ]] || ! kill -0 "$AGENT_PID" 2>/dev/null; then
				kill -0 "$AGENT_PID" 2>/dev/null && agent_off
				agent_config "$m"; agent_start
			fi
			[[ $m != off ]] && cur=$m
			[[ ${GPUEXT_NODE_CREATE:-1} == 1 ]] && for i in 1 2 3 4 5; do echo "$m $(cs_once)"; done >>"$OUT/overhead-create.txt"
			for f in ${GPUEXT_NODE_BENCH:-resnet generate}; do echo "$m $f $(bench_once "$f")" >>"$OUT/overhead-frameworks.txt"; done
		done
	done
	if [[ $cur != on ]] || ! kill -0 "$AGENT_PID" 2>/dev/null; then kill -0 "$AGENT_PID" 2>/dev/null && agent_off; agent_config; agent_start; fi
	med() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
	if [[ ${GPUEXT_NODE_CREATE:-1} == 1 ]]; then
	con=$(awk '$1 == "on" {print $2}' "$OUT/overhead-create.txt" | med); coff=$(awk '$1 == "off" {print $2}' "$OUT/overhead-create.txt" | med)
	info "create+start median ms: with agent $con, without $coff ($ROUNDS rounds x 5, interleaved)"
	if awk -v a="$con" -v b="$coff" 'BEGIN {exit !(b > 0 && a / b <= 1.05)}'; then ok "overhead-create-start ($(awk -v a="$con" -v b="$coff" 'BEGIN {printf "%.3f", a / b}'))"
	else bad overhead-create-start "with/without = $con/$coff ms (target <= 1.05)"; fi
	fi
	for f in ${GPUEXT_NODE_BENCH:-resnet generate}; do
		[[ " ${OMODES[*]} " == *" nomps "* ]] && info "$f median per s without MPS (the interposer alone): $(awk -v f=$f '$1 == "nomps" && $2 == f {print $3}' "$OUT/overhead-frameworks.txt" | med)"
		on=$(awk -v f=$f '$1 == "on" && $2 == f {print $3}' "$OUT/overhead-frameworks.txt" | med)
		off=$(awk -v f=$f '$1 == "off" && $2 == f {print $3}' "$OUT/overhead-frameworks.txt" | med)
		info "$f median per s: with gpuext $on, without $off ($ROUNDS rounds, interleaved)"
		if awk -v a="$on" -v b="$off" 'BEGIN {exit !(b > 0 && a / b >= 0.99)}'; then ok "overhead-$f ($(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", a / b}'))"
		else bad "overhead-$f" "with/without = $on/$off (target >= 0.99)"; fi
	done
	crictl stopp "$OPOD" >/dev/null 2>&1; crictl rmp -f "$OPOD" >/dev/null 2>&1
fi

# ---- 9. priority: latency-critical beside best-effort trainers, through admission --
if want priority; then
	log "priority: a latency-critical container beside 2 and 4 batch trainers under MPS"
	# shellcheck source=test/gpu-node/priority.sh
	source "$REPO/test/gpu-node/priority.sh"
fi

# ---- the end: what the agent logged, and the node taken down -----------------------
cp "$AGENT_LOG" "$OUT/agent.log" 2>/dev/null
cp "$GPUEXT_LAB_CONTAINERD_LOG" "$OUT/containerd.log" 2>/dev/null
teardown
echo "$pass passed, $fail failed ($SECONDS s)"
