# multi_gpu.sh - sourced by gpu-test.sh (section multi-gpu, issue 35): the
# per-GPU behaviour of discovery, quotas, MPS and device probes on a machine
# with two or more GPUs, with the real interposer and real CUDA apps.
# With one GPU it builds multigpu.cu (build-multigpu), then prints "SKIP
# multi-gpu: ..." (a FAIL under GPUEXT_GPU_MULTI=required) and checks
# nothing else; with none it only skips.
#
# Uses gpu-test.sh's ok/bad/skip/info, want, $W, $OUT, $REPO, $LIB and GiB;
# bin/gpuextctl, bin/gpuext-gpuview, bin/gpuext-nri-plugin (make build) and
# out/gpu/kubelet-stub (make gpu-prep), carried; test/gpu/multigpu.cu, built
# here with nvcc. Tenants are written by hand (gpuextctl settings write
# --gpus/--gpu-quotas), as the other sections do, and given the env the
# device plugin's Allocate returns for their devices (CUDA_VISIBLE_DEVICES
# the GPUs' UUIDs, CUDA_DEVICE_ORDER=PCI_BUS_ID); they are not in
# containers, so they see every GPU's device node (make gpu-node has
# containers). Checks, one PASS/FAIL line each with its figures:
#   mgpu-discovery-nvml      gpuext-gpuview --gpus: one GPU per nvidia-smi row, same index, UUID, memory,
#                            in PCI bus order
#   mgpu-cuda-order          CUDA's devices with CUDA_DEVICE_ORDER=PCI_BUS_ID = nvidia-smi's (PCI id, UUID)
#   mgpu-torch-order         the same for torch.cuda
#   mgpu-device-plugin-pools the agent's device plugin (discovering through gpuext-gpuview) advertises
#                            floor(memory / 1GiB) units per GPU, gpu<I>-m000.., all healthy
#   mgpu-device-plugin-allocate  Allocate of GPU k's units: CUDA_VISIBLE_DEVICES = its UUID, CDI nvidia.com/gpu=k
#   mgpu-gpuK-*              a tenant given 2GiB on GPU k (each k >= 1): sees one GPU, the right one; allocates
#                            2GiB there and is refused 1MiB more; cuMemGetInfo, torch.cuda.mem_get_info and
#                            NVML report 2GiB on it; its memory is on GPU k (nvidia-smi)
#   mgpu-gpu0-unaffected     while GPU 1's tenant holds its quota, a tenant given 3GiB on GPU 0 sees GPU 0
#                            only and allocates its 3GiB
#   mgpu-two-gpus-*          a tenant given 1GiB on GPU 0 and 3GiB on GPU 1: full on GPU 0, it still
#                            allocates 3GiB on GPU 1; a second process sees both full; each GPU's memory
#                            is where nvidia-smi says; after kill -9 both are free again
#   mgpu-mps-share           a best-effort tenant (smPercent 40, MPS client priority 1) under an MPS daemon:
#                            on every GPU its kernel runs on at most ~40% of the SMs, where a client
#                            without the interposer runs on more
#   mgpu-mps-client-priority the device runtime set CUDA_MPS_CLIENT_PRIORITY=1 before the first context
#   mgpu-probes-per-gpu      launch-stats spliced into gx_tick, launched a different number of times on
#                            each GPU: each GPU's context has its own maps file with exactly its launches
#                            and blocks; the tenant's total is their sum
# shellcheck shell=bash

MG=$W/mgpu
: "${GiB:=$((1 << 30))}"
GX=$REPO/bin/gpuextctl
declare -a MG_UUID=() MG_PCI=() MG_MIB=()

# mg_inject ID: MGI is the env admission injects for tenant ID (its dirs
# under $MG in a state dir's layout, which gpuextctl probes --state-dir reads)
mg_inject() {
	MGI=(LD_PRELOAD="$LIB" GPUEXT_TENANT_ID="$1" GPUEXT_TENANT_DIR="$MG/tenants/$1" GPUEXT_TENANT_CONFIG="$MG/tenants/$1/config.json"
		GPUEXT_TENANT_ACCT="$MG/acct/$1")
}
# mg_tenant ID settings-write-args...: a fresh tenant dir and acct dir, MGI set
mg_tenant() {
	local id=$1
	shift
	rm -rf "$MG/tenants/$id" "$MG/acct/$id" && mkdir -p "$MG/tenants/$id" "$MG/acct/$id" && chmod 1777 "$MG/acct/$id"
	"$GX" settings write --dir "$MG/tenants/$id" --tenant "$id" --policy multi-gpu "$@" >>"$OUT/mgpu-settings.log" 2>&1 ||
		{ bad "mgpu-tenant-$id" "gpuextctl settings write $* failed (mgpu-settings.log)"; return 1; }
	mg_inject "$id"
}
# mg_vis GPU...: CUDA_VISIBLE_DEVICES as Allocate sets it for those GPUs (their UUIDs)
mg_vis() {
	local g out=""
	for g in "$@"; do out="$out${out:+,}${MG_UUID[$g]}"; done
	echo "$out"
}
# mg_field LINE KEY: the value of KEY=... in LINE
mg_field() { grep -o "$2=[^ ]*" <<<"$1" | head -1 | cut -d= -f2; }
# mg_apps_mib PID UUID: MiB that nvidia-smi lists for PID on the GPU of UUID (0: none)
mg_apps_mib() {
	nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' |
		awk -F, -v p="$1" -v u="$2" '$1 == p && $2 == u {m += $3} END {print m + 0}'
}
# mg_wait FILE WORD: waits (10s at most) for WORD in FILE
mg_wait() { for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# 1. NVML discovery and CUDA's order.
mg_discovery() {
	local smi gv
	smi=$(nvidia-smi --query-gpu=index,pci.bus_id,uuid,memory.total --format=csv,noheader,nounits 2>&1 | tr -d ' ')
	echo "$smi" >"$OUT/mgpu-nvidia-smi.csv"
	local i=0 idx pci uuid mib
	while IFS=, read -r idx pci uuid mib; do
		[[ $idx == "$i" ]] || { bad mgpu-discovery-nvml "nvidia-smi row $i is index '$idx' (mgpu-nvidia-smi.csv)"; return; }
		MG_PCI[i]=${pci,,} MG_UUID[i]=$uuid MG_MIB[i]=$mib
		i=$((i + 1))
	done <<<"$smi"
	if [[ -x $REPO/bin/gpuext-gpuview ]]; then
		gv=$("$REPO/bin/gpuext-gpuview" --gpus --json 2>&1)
		echo "$gv" >"$OUT/mgpu-gpuview-gpus.json"
		local why
		# (2>&1: a traceback, when gpuext-gpuview printed no JSON, is a reason too)
		why=$(python3 - "$OUT/mgpu-gpuview-gpus.json" "$OUT/mgpu-nvidia-smi.csv" 2>&1 <<'PY'
import json, sys
gv = json.load(open(sys.argv[1]))
smi = [l.split(",") for l in open(sys.argv[2]).read().split("\n") if l]
bad = []
if len(gv) != len(smi):
    bad.append(f"gpuext-gpuview lists {len(gv)} GPUs, nvidia-smi {len(smi)}")
for i, (g, s) in enumerate(zip(gv, smi)):
    if g["index"] != i or g["uuid"] != s[2] or g["memoryBytes"] >> 20 != int(s[3]):
        bad.append(f"GPU {i}: gpuview index={g['index']} uuid={g['uuid']} MiB={g['memoryBytes'] >> 20}, nvidia-smi {s[2]} {s[3]}MiB")
buses = [s[1].lower() for s in smi]
if buses != sorted(buses):
    bad.append(f"NVML's order is not PCI bus order: {buses}")
print("; ".join(bad))
PY
)
		if [[ -z $why ]]; then
			ok "mgpu-discovery-nvml (${#MG_UUID[@]} GPUs: $(for i in "${!MG_UUID[@]}"; do printf '%s %s %s %sMiB; ' "$i" "${MG_PCI[i]}" "${MG_UUID[i]}" "${MG_MIB[i]}"; done))"
		else
			bad mgpu-discovery-nvml "$(tr '\n' ' ' <<<"$why" | tail -c 600)(mgpu-gpuview-gpus.json, mgpu-nvidia-smi.csv)"
		fi
	else
		bad mgpu-discovery-nvml "needs bin/gpuext-gpuview (make build here, carry bin)"
	fi
	# CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID (the device plugin sets it) is NVML's
	local list want got
	"$W/multigpu" list >"$OUT/mgpu-cuda-default-order.txt" 2>&1
	list=$(CUDA_DEVICE_ORDER=PCI_BUS_ID "$W/multigpu" list 2>&1)
	echo "$list" >"$OUT/mgpu-cuda-order.txt"
	want=$(for i in "${!MG_UUID[@]}"; do echo "$i ${MG_PCI[i]} ${MG_UUID[i]}"; done)
	got=$(awk '/^dev / {sub("pci=", "", $3); sub("uuid=", "", $4); print $2, tolower($3), $4}' <<<"$list")
	if [[ -n $got && $got == "$want" ]]; then ok "mgpu-cuda-order (CUDA ordinal = NVML index on ${#MG_UUID[@]} GPUs)"
	else bad mgpu-cuda-order "CUDA with PCI_BUS_ID: '$(tr '\n' ';' <<<"$got")', nvidia-smi: '$(tr '\n' ';' <<<"$want")'"; fi
	info "mgpu CUDA's default order (FASTEST_FIRST): $(awk '/^dev / {printf "%s %s; ", $2, $4}' "$OUT/mgpu-cuda-default-order.txt")"
	if python3 -c 'import torch' 2>/dev/null; then
		list=$(CUDA_DEVICE_ORDER=PCI_BUS_ID python3 "$REPO/test/gpu/torch_devices.py" 2>&1)
		echo "$list" >"$OUT/mgpu-torch-order.txt"
		got=$(awk '/^torch_dev / {sub("uuid=", "", $3); print $2, $3}' <<<"$list")
		want=$(for i in "${!MG_UUID[@]}"; do echo "$i ${MG_UUID[i],,}"; done)
		if [[ -n $got && ${got,,} == "$want" ]]; then ok "mgpu-torch-order (torch.cuda device i = NVML index i on ${#MG_UUID[@]} GPUs)"
		else bad mgpu-torch-order "torch: '$(tr '\n' ';' <<<"$got")', nvidia-smi: '$(tr '\n' ';' <<<"$want")' (mgpu-torch-order.txt)"; fi
	else
		bad mgpu-torch-order "python3 has no torch"
	fi
}

# 2. The device plugin's view: the real agent (--nri=false, as on Docker
# hosts) with a devicePlugin section listing no GPUs, so it discovers them
# through gpuext-gpuview, and the kubelet stub reading it.
mg_device_plugin() {
	local agent=$REPO/bin/gpuext-nri-plugin stub=$REPO/out/gpu/kubelet-stub gv=$REPO/bin/gpuext-gpuview
	if [[ ! -x $agent || ! -x $stub || ! -x $gv ]]; then
		bad mgpu-device-plugin-pools "needs bin/gpuext-nri-plugin, bin/gpuext-gpuview (make build) and out/gpu/kubelet-stub (make gpu-prep), carried"
		return
	fi
	local D=$MG/dp n=${#MG_UUID[@]} last=$((${#MG_UUID[@]} - 1)) stub_pid agent_pid
	rm -rf "$D" && mkdir -p "$D/kubelet" "$D/state" "$D/agent"
	mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null
	printf '{"pinDir":"/sys/fs/bpf/gpuext-mgpu","stateDir":"%s","devrtDir":"%s","logFile":"%s","agentSocket":"%s","devicePlugin":{"kubeletDir":"%s","gpuview":"%s","unit":"1GiB"}}\n' \
		"$D/state" "$W/devrt" "$OUT/mgpu-agent.log" "$D/agent/agent.sock" "$D/kubelet" "$gv" >"$D/config.json"
	# Allocate: GPU 1's first two units; then one unit of GPU 0 and one of the last GPU
	"$stub" --dir "$D/kubelet" --timeout 60s --preferred 2 --allocate gpu1-m000,gpu1-m001 --allocate "gpu0-m000,gpu$last-m000" \
		>"$OUT/mgpu-device-plugin.json" 2>"$OUT/mgpu-kubelet-stub.err" &
	stub_pid=$!
	sleep 0.5
	"$agent" --nri=false --config "$D/config.json" >>"$OUT/mgpu-agent.out" 2>&1 &
	agent_pid=$!
	wait "$stub_pid"
	local rc=$?
	kill "$agent_pid" 2>/dev/null; wait "$agent_pid" 2>/dev/null
	rm -rf /sys/fs/bpf/gpuext-mgpu
	if [[ $rc != 0 ]]; then
		bad mgpu-device-plugin-pools "the kubelet stub: $(head -c 300 "$OUT/mgpu-kubelet-stub.err"); agent: $(tail -n 3 "$OUT/mgpu-agent.log" 2>/dev/null | head -c 600)"
		return
	fi
	local res
	res=$(python3 - "$OUT/mgpu-device-plugin.json" "$OUT/mgpu-nvidia-smi.csv" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
smi = [l.split(",") for l in open(sys.argv[2]).read().split("\n") if l]
bad, figs = [], []
for i, s in enumerate(smi):
    units = int(s[3]) // 1024  # floor(memory / 1GiB), memory in MiB
    want = [f"gpu{i}-m{u:03d}" for u in range(units)]
    got = [d for d in a["devices"] if d.startswith(f"gpu{i}-")]
    figs.append(f"gpu{i} {len(got)} units")
    if got != want:
        bad.append(f"gpu{i}: {len(got)} devices {got[:1]}..{got[-1:]}, want {units} gpu{i}-m000..")
if len(a["devices"]) != sum(int(s[3]) // 1024 for s in smi):
    bad.append(f"{len(a['devices'])} devices in all")
if a["unhealthy"]:
    bad.append(f"unhealthy: {a['unhealthy'][:4]}")
if len({d.split('-')[0] for d in a.get("preferred", [])}) != 1:
    bad.append(f"preferred allocation of 2 units spans GPUs: {a.get('preferred')}")
print("pools", "ok" if not bad else "; ".join(bad), "|", ", ".join(figs))
last = len(smi) - 1
al = a["allocations"]
want = [(smi[1][2], ["nvidia.com/gpu=1"]), (smi[0][2] + "," + smi[last][2], ["nvidia.com/gpu=0", f"nvidia.com/gpu={last}"])]
abad = []
for k, (vis, cdi) in enumerate(want):
    if k >= len(al):
        abad.append(f"allocation {k} missing")
        continue
    e = al[k]["envs"]
    if e.get("CUDA_VISIBLE_DEVICES") != vis or e.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" or al[k]["cdiDevices"] != cdi:
        abad.append(f"{al[k]['devices']}: env {e} cdi {al[k]['cdiDevices']}, want CUDA_VISIBLE_DEVICES={vis} {cdi}")
print("allocate", "ok" if not abad else "; ".join(abad))
PY
)
	local pools alloc
	pools=$(grep '^pools ' <<<"$res"); alloc=$(grep '^allocate ' <<<"$res")
	if [[ $pools == "pools ok |"* ]]; then ok "mgpu-device-plugin-pools (${pools#*| }; discovered through gpuext-gpuview, all healthy)"
	else bad mgpu-device-plugin-pools "${pools#pools } (mgpu-device-plugin.json)"; fi
	if [[ $alloc == "allocate ok" ]]; then ok "mgpu-device-plugin-allocate (GPU 1 -> CUDA_VISIBLE_DEVICES=${MG_UUID[1]}, nvidia.com/gpu=1; GPUs 0,$last -> both UUIDs)"
	else bad mgpu-device-plugin-allocate "${alloc#allocate } (mgpu-device-plugin.json)"; fi
	info "mgpu device plugin: $n GPUs, $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["devices"]))' "$OUT/mgpu-device-plugin.json") devices of 1GiB"
}

# 3. A tenant given 2GiB on GPU k only, beside a tenant on GPU 0.
mg_one_gpu() { # k
	local k=$1 Q=$((2 * GiB)) id=$((60 + $1)) out vis
	vis=$(mg_vis "$k")
	mg_tenant "$id" --gpus "$k" --gpu-quotas "$Q" || return
	local env=("${MGI[@]}" CUDA_VISIBLE_DEVICES="$vis" CUDA_DEVICE_ORDER=PCI_BUS_ID)
	out=$(env "${env[@]}" "$W/multigpu" count list info alloc "$Q" alloc $((1 << 20)) info 2>&1)
	echo "$out" >"$OUT/mgpu-gpu$k.txt"
	local n uuid i0 i1
	n=$(awk '/^devices / {print $2}' <<<"$out"); uuid=$(awk '/^dev 0 / {sub("uuid=", "", $4); print $4}' <<<"$out")
	if [[ $n == 1 && $uuid == "${MG_UUID[k]}" ]]; then ok "mgpu-gpu$k-sees-one (1 device: $uuid)"
	else bad "mgpu-gpu$k-sees-one" "devices=$n, device 0 = '$uuid', want 1 device, ${MG_UUID[k]} (mgpu-gpu$k.txt)"; fi
	if grep -qx "alloc $Q ok" <<<"$out" && grep -qx "alloc 1048576 oom" <<<"$out"; then ok "mgpu-gpu$k-quota (2GiB allocated on GPU $k, 1MiB more refused)"
	else bad "mgpu-gpu$k-quota" "$(grep '^alloc' <<<"$out" | tr '\n' ';') want 'alloc $Q ok;alloc 1048576 oom'"; fi
	i0=$(grep '^info' <<<"$out" | head -1); i1=$(grep '^info' <<<"$out" | tail -1)
	if [[ $(mg_field "$i0" total) == "$Q" && $(mg_field "$i0" free) == "$Q" && $(mg_field "$i1" total) == "$Q" && $(mg_field "$i1" free) == 0 ]]; then
		ok "mgpu-gpu$k-meminfo (cuMemGetInfo total=$Q, free $Q then 0)"
	else
		bad "mgpu-gpu$k-meminfo" "before: '$i0' after: '$i1', want total=$Q free=$Q then free=0"
	fi
	if python3 -c 'import torch' 2>/dev/null; then
		out=$(env "${env[@]}" python3 "$REPO/test/gpu/torch_devices.py" 2>&1; env "${env[@]}" python3 "$REPO/test/gpu/torch_check.py" "$Q" 2>&1)
		echo "$out" >"$OUT/mgpu-gpu$k-torch.txt"
		local tl
		tl=$(grep '^torch_dev 0 ' <<<"$out")
		if grep -qx 'torch_devices 1' <<<"$out" && [[ $(mg_field "$tl" uuid) == "${MG_UUID[k],,}" || $(mg_field "$tl" uuid) == "${MG_UUID[k]}" ]] &&
			[[ $(mg_field "$tl" total) == "$Q" ]] && grep -q 'torch_over_quota oom' <<<"$out"; then
			ok "mgpu-gpu$k-torch (1 device, mem_get_info total=$Q, past the quota: OutOfMemoryError)"
		else
			bad "mgpu-gpu$k-torch" "$(grep -E '^torch_(dev|devices|over)' <<<"$out" | tr '\n' ';') (mgpu-gpu$k-torch.txt)"
		fi
	else
		bad "mgpu-gpu$k-torch" "python3 has no torch"
	fi
	# NVML in the tenant's process: the GPU it was given reports the quota
	# (NVML lists every GPU here: the tenant is not in a container)
	if python3 -c 'import pynvml' 2>/dev/null; then
		out=$(env "${env[@]}" python3 -c '
import pynvml as n
n.nvmlInit()
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    u = n.nvmlDeviceGetUUID(h)
    u = u.decode() if isinstance(u, bytes) else u
    print(f"{i},{u},{n.nvmlDeviceGetMemoryInfo(h).total >> 20}")' 2>&1)
		NVML_TOOL=pynvml
	else
		out=$(env "${env[@]}" nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits 2>&1 | tr -d ' ')
		NVML_TOOL=nvidia-smi
	fi
	echo "$out" >"$OUT/mgpu-gpu$k-nvml.txt"
	local mib
	mib=$(awk -F, -v u="${MG_UUID[k]}" '$2 == u {print $3}' <<<"$out")
	if [[ $mib == $((Q >> 20)) ]]; then ok "mgpu-gpu$k-nvml ($NVML_TOOL in the tenant: GPU $k ${MG_UUID[k]} total ${mib}MiB)"
	else bad "mgpu-gpu$k-nvml" "$NVML_TOOL in the tenant: GPU $k total '${mib}' MiB, want $((Q >> 20)); all: $(tr '\n' ';' <<<"$out")"; fi
}

# While GPU 1's tenant holds its quota there, a tenant on GPU 0 is unaffected
# (sees GPU 0 alone, allocates its own 3GiB), and the held memory is on GPU 1.
mg_neighbours() {
	local Q1=$((2 * GiB)) Q0=$((3 * GiB)) holder out
	mg_tenant 71 --gpus 1 --gpu-quotas "$Q1" || return
	env "${MGI[@]}" CUDA_VISIBLE_DEVICES="$(mg_vis 1)" CUDA_DEVICE_ORDER=PCI_BUS_ID "$W/multigpu" alloc "$Q1" hold >"$OUT/mgpu-holder1.txt" 2>&1 &
	holder=$!
	mg_wait "$OUT/mgpu-holder1.txt" holding
	mg_tenant 70 --gpus 0 --gpu-quotas "$Q0" || { kill -9 "$holder"; wait "$holder" 2>/dev/null; return; }
	out=$(env "${MGI[@]}" CUDA_VISIBLE_DEVICES="$(mg_vis 0)" CUDA_DEVICE_ORDER=PCI_BUS_ID "$W/multigpu" count list alloc "$Q0" info 2>&1)
	echo "$out" >"$OUT/mgpu-gpu0-neighbour.txt"
	local on1 on0 uuid inf
	on1=$(mg_apps_mib "$holder" "${MG_UUID[1]}"); on0=$(mg_apps_mib "$holder" "${MG_UUID[0]}")
	kill -9 "$holder"; wait "$holder" 2>/dev/null
	uuid=$(awk '/^dev 0 / {sub("uuid=", "", $4); print $4}' <<<"$out"); inf=$(grep '^info' <<<"$out")
	if grep -qx "alloc $Q1 ok" "$OUT/mgpu-holder1.txt" && grep -qx 'devices 1' <<<"$out" && [[ $uuid == "${MG_UUID[0]}" ]] &&
		grep -qx "alloc $Q0 ok" <<<"$out" && [[ $(mg_field "$inf" total) == "$Q0" && $(mg_field "$inf" free) == 0 ]]; then
		ok "mgpu-gpu0-unaffected (GPU 1's tenant holding 2GiB; GPU 0's tenant sees $uuid only and allocates its 3GiB: $inf)"
	else
		bad mgpu-gpu0-unaffected "holder: $(tr '\n' ';' <"$OUT/mgpu-holder1.txt") GPU 0 tenant: $(tr '\n' ';' <<<"$out")"
	fi
	if ((on1 >= Q1 >> 20 && on0 == 0)); then ok "mgpu-gpu1-memory-on-gpu1 (nvidia-smi: the holder has ${on1}MiB on GPU 1, none on GPU 0)"
	else bad mgpu-gpu1-memory-on-gpu1 "nvidia-smi: the holder has ${on1}MiB on GPU 1 (want >= $((Q1 >> 20))), ${on0}MiB on GPU 0 (want 0)"; fi
}

# 4. A tenant given units on two GPUs: a quota on each, counted apart.
mg_two_gpus() {
	local Q0=$GiB Q1=$((3 * GiB)) holder out third
	mg_tenant 72 --gpus 0,1 --gpu-quotas "$Q0,$Q1" || return
	local env=("${MGI[@]}" CUDA_VISIBLE_DEVICES="$(mg_vis 0 1)" CUDA_DEVICE_ORDER=PCI_BUS_ID)
	env "${env[@]}" "$W/multigpu" count device 0 alloc "$Q0" alloc 1048576 device 1 alloc "$Q1" alloc 1048576 info hold \
		>"$OUT/mgpu-two-holder.txt" 2>&1 &
	holder=$!
	mg_wait "$OUT/mgpu-two-holder.txt" holding
	out=$(env "${env[@]}" "$W/multigpu" device 0 info alloc 1048576 device 1 info alloc 1048576 2>&1)
	echo "$out" >"$OUT/mgpu-two-second.txt"
	local on0 on1
	on0=$(mg_apps_mib "$holder" "${MG_UUID[0]}"); on1=$(mg_apps_mib "$holder" "${MG_UUID[1]}")
	kill -9 "$holder"; wait "$holder" 2>/dev/null
	third=$(env "${env[@]}" "$W/multigpu" device 1 alloc "$Q1" device 0 alloc "$Q0" 2>&1)
	local h
	h=$(grep -E '^(devices|alloc|info)' "$OUT/mgpu-two-holder.txt" | tr '\n' ';')
	if [[ $h == "devices 2;alloc $Q0 ok;alloc 1048576 oom;alloc $Q1 ok;alloc 1048576 oom;info dev=1 free=0 total=$Q1;" ]]; then
		ok "mgpu-two-gpus-quota-each (GPU 0 full at 1GiB, then 3GiB on GPU 1 and no more: $h)"
	else
		bad mgpu-two-gpus-quota-each "'$h', want 2 devices, 1GiB ok then 1MiB refused on each GPU after 3GiB on GPU 1"
	fi
	local s
	s=$(grep -E '^(info|alloc)' <<<"$out" | tr '\n' ';')
	if [[ $s == "info dev=0 free=0 total=$Q0;alloc 1048576 oom;info dev=1 free=0 total=$Q1;alloc 1048576 oom;" ]]; then
		ok "mgpu-two-gpus-across-processes (a second process: $s)"
	else
		bad mgpu-two-gpus-across-processes "second process: '$s', want both GPUs full and refused"
	fi
	if ((on0 >= Q0 >> 20 && on0 < Q1 >> 20 && on1 >= Q1 >> 20)); then ok "mgpu-two-gpus-memory-where-given (nvidia-smi: ${on0}MiB on GPU 0, ${on1}MiB on GPU 1)"
	else bad mgpu-two-gpus-memory-where-given "nvidia-smi: ${on0}MiB on GPU 0 (want 1GiB+), ${on1}MiB on GPU 1 (want 3GiB+)"; fi
	if [[ $(grep -c '^alloc [0-9]* ok$' <<<"$third") == 2 ]]; then ok "mgpu-two-gpus-kill9-reclaimed (after kill -9, 3GiB on GPU 1 and 1GiB on GPU 0 again)"
	else bad mgpu-two-gpus-kill9-reclaimed "after kill -9: $(tr '\n' ';' <<<"$third")"; fi
}

# 5. MPS: a best-effort tenant's share and client priority on every GPU.
mg_mps() {
	local ctl
	ctl=$(command -v nvidia-cuda-mps-control || true)
	if [[ -z $ctl ]]; then bad mgpu-mps-share "no nvidia-cuda-mps-control"; return; fi
	local D=$MG/mps pct=40 all=("${!MG_UUID[@]}")
	rm -rf "$D" && mkdir -p "$D/pipe" "$D/log"
	CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_LOG_DIRECTORY="$D/log" "$ctl" -d
	sleep 0.5
	mg_tenant 73 --class best-effort --sm-percent "$pct" --mps-client-priority 1 || return
	local steps=() g vis
	for g in "${all[@]}"; do steps+=(device "$g" sms 2048); done
	vis=$(mg_vis "${all[@]}")
	local plain tenant
	plain=$(CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_VISIBLE_DEVICES="$vis" CUDA_DEVICE_ORDER=PCI_BUS_ID "$W/multigpu" "${steps[@]}" 2>&1)
	tenant=$(env "${MGI[@]}" GPUEXT_DEVRT_DEBUG=1 CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_VISIBLE_DEVICES="$vis" CUDA_DEVICE_ORDER=PCI_BUS_ID \
		"$W/multigpu" "${steps[@]}" 2>&1)
	{ echo "== a client without the interposer"; echo "$plain"; echo "== the best-effort tenant ($pct%, priority 1)"; echo "$tenant"; } >"$OUT/mgpu-mps.txt"
	echo quit | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" "$ctl" >/dev/null 2>&1
	sleep 1
	local figs="" fail=""
	for g in "${all[@]}"; do
		local pl tl of pu tu cap
		pl=$(grep "^sms dev=$g " <<<"$plain"); tl=$(grep "^sms dev=$g " <<<"$tenant")
		of=$(mg_field "$tl" of); pu=$(mg_field "$pl" used); tu=$(mg_field "$tl" used)
		# MPS rounds a share up to whole TPCs (2 SMs); 4 SMs of slack
		cap=$(( (${of:-0} * pct + 99) / 100 + 4 ))
		figs="$figs GPU $g: ${tu:-?} of ${of:-?} SMs (cap $cap), plain client ${pu:-?};"
		if [[ -z $tu || -z $pu ]] || ((tu < 1 || tu > cap || pu <= cap)); then fail="$fail GPU $g"; fi
	done
	if [[ -z $fail ]]; then ok "mgpu-mps-share (best-effort at $pct% under MPS, on every GPU:$figs)"
	else bad mgpu-mps-share "on$fail:$figs (mgpu-mps.txt)"; fi
	if grep -q "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct CUDA_MPS_CLIENT_PRIORITY=1" <<<"$tenant" &&
		[[ $(grep -n 'CUDA_MPS_CLIENT_PRIORITY=1' <<<"$tenant" | head -1 | cut -d: -f1) -lt $(grep -n '^sms dev=' <<<"$tenant" | head -1 | cut -d: -f1) ]]; then
		ok "mgpu-mps-client-priority (CUDA_MPS_CLIENT_PRIORITY=1 set by the device runtime before the first of its ${#MG_UUID[@]} contexts)"
	else
		bad mgpu-mps-client-priority "no 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct CUDA_MPS_CLIENT_PRIORITY=1' before the first kernel (mgpu-mps.txt)"
	fi
}

# 6. Device probes on each GPU: gx_tick launched 2+g times with 8*(g+1)
# blocks on GPU g, counted in that GPU's context's maps file.
mg_probes() {
	local id=74 g steps=() P=$MG/acct/74/probes
	mg_tenant "$id" --probes launch-stats || return
	"$GX" probes compile --out "$MG/tenants/$id/probes" --kernel gx_tick launch-stats >>"$OUT/mgpu-probes-compile.log" 2>&1 ||
		{ bad mgpu-probes-per-gpu "gpuextctl probes compile failed (mgpu-probes-compile.log)"; return; }
	local all=() wantl=0 wantb=0
	for g in "${!MG_UUID[@]}"; do
		all+=("$g")
		steps+=(device "$g" ctx launch $((2 + g)) $((8 * (g + 1))))
		wantl=$((wantl + 2 + g)); wantb=$((wantb + (2 + g) * 8 * (g + 1)))
	done
	local out
	out=$(env "${MGI[@]}" CUDA_VISIBLE_DEVICES="$(mg_vis "${all[@]}")" CUDA_DEVICE_ORDER=PCI_BUS_ID "$W/multigpu" "${steps[@]}" 2>"$OUT/mgpu-probes.err")
	echo "$out" >"$OUT/mgpu-probes.txt"
	cat "$P"/*.status >>"$OUT/mgpu-probes.txt" 2>/dev/null
	ls -l "$P" >>"$OUT/mgpu-probes.txt" 2>&1
	# which maps file is which GPU's: every context the image is bound in
	# after its first is named in a status line "image=I ctx=N state=bound
	# context=PTR" and has <key>-<image>-<N>.maps; the first context is
	# named in none and has <key>-<image>.maps. The app printed each GPU's
	# context pointer (ctx dev=G context=PTR).
	local figs="" fail="" unnamed=0 img
	# the image of multigpu.cu: the one patched (its kernels carry the probes)
	img=$(grep -ho 'image=[0-9]* state=patched reason=ok' "$P"/*.status 2>/dev/null | head -1 | cut -d' ' -f1 | cut -d= -f2)
	for g in "${!MG_UUID[@]}"; do
		local ptr line n f d got l b wl wb
		ptr=$(awk -v d="dev=$g" '$1 == "ctx" && $2 == d {sub("context=", "", $3); print $3}' <<<"$out")
		line=$(grep -h "^image=$img ctx=[0-9]* state=bound context=$ptr\$" "$P"/*.status 2>/dev/null | head -1)
		f=""
		if [[ -z $ptr || -z $img ]]; then
			:
		elif [[ -n $line ]]; then
			n=$(grep -o 'ctx=[0-9]*' <<<"$line" | cut -d= -f2)
			f=$(find "$P" -maxdepth 1 -regex ".*/[0-9]+-$img-$n\.maps" -printf '%f\n' | head -1)
		else
			unnamed=$((unnamed + 1))
			f=$(find "$P" -maxdepth 1 -regex ".*/[0-9]+-$img\.maps" -printf '%f\n' | head -1)
		fi
		wl=$((2 + g)); wb=$(((2 + g) * 8 * (g + 1)))
		l="" b=""
		if [[ -n $f ]]; then
			d=$MG/probes-gpu$g && rm -rf "$d" && mkdir -p "$d" && cp "$P/$f" "$d/"
			got=$("$GX" probes read --json --manifest "$MG/tenants/$id/probes/manifest.json" "$d" 2>&1)
			{ echo "== GPU $g: $f"; echo "$got"; } >>"$OUT/mgpu-probes.txt"
			read -r l b < <(python3 -c '
import json, sys
p = [x for x in json.load(sys.stdin)["probes"] if x["name"] == "launch-stats"]
c = p[0].get("counters", {}) if p else {}
print(c.get("launches", "-"), c.get("blocks", "-"))' <<<"$got" 2>/dev/null)
		fi
		figs="$figs GPU $g ${f:-no maps file}: launches ${l:-?} blocks ${b:-?} (want $wl $wb);"
		[[ $l == "$wl" && $b == "$wb" ]] || fail="$fail GPU $g"
	done
	((unnamed <= 1)) || fail="$fail ($unnamed contexts named in no status line)"
	local tl tb
	read -r tl tb < <("$GX" probes --state-dir "$MG" --json 2>/dev/null | python3 -c '
import json, sys
r = [x for x in json.load(sys.stdin) if x["tenant"] == int(sys.argv[1])]
r = r[0] if r else {}
print(r.get("launchesBy", {}).get("device", "-"), r.get("blocksBy", {}).get("device", "-"))' "$id")
	if [[ -z $fail && $tl == "$wantl" && $tb == "$wantb" ]]; then
		ok "mgpu-probes-per-gpu (each GPU's context counted exactly its own:$figs tenant total $tl launches $tb blocks)"
	else
		bad mgpu-probes-per-gpu "${fail:+wrong on$fail:}$figs tenant total launches=$tl blocks=$tb (want $wantl $wantb) (mgpu-probes.txt)"
	fi
}

mg_checks() {
	local n built=no
	n=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)
	# built wherever there is a GPU, so that a one-GPU run proves it builds
	if ((n >= 1)); then
		rm -rf "$MG" && mkdir -p "$MG"
		if nvcc -O2 -arch=sm_90 -o "$W/multigpu" "$REPO/test/gpu/multigpu.cu" -lcuda >>"$OUT/build-multigpu.log" 2>&1; then
			ok build-multigpu
			built=yes
			info "multi-gpu: multigpu count list: $("$W/multigpu" count list 2>&1 | tr '\n' ';')"
		else
			bad build-multigpu "nvcc failed (build-multigpu.log)"
		fi
	fi
	if ((n < 2)); then
		if [[ ${GPUEXT_GPU_MULTI:-} == required ]]; then
			bad multi-gpu "GPUEXT_GPU_MULTI=required and nvidia-smi lists $n GPU(s): the section needs two or more"
		else
			skip multi-gpu "nvidia-smi lists $n GPU(s), the section needs two or more (GPUEXT_GPU_MULTI=required makes this a FAIL)"
		fi
		return
	fi
	info "multi-gpu: $n GPUs: $(nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv,noheader | tr '\n' ';')"
	[[ $built == yes ]] || return
	if [[ ! -x $GX || ! -f $LIB ]]; then
		bad multi-gpu "needs bin/gpuextctl (make gpu-prep here, carry bin) and the device runtime"
		return
	fi
	mg_discovery
	((${#MG_UUID[@]} >= 2)) || return
	mg_device_plugin
	local k
	for ((k = 1; k < ${#MG_UUID[@]}; k++)); do mg_one_gpu "$k"; done
	mg_neighbours
	mg_two_gpus
	mg_mps
	mg_probes
}

if want multi-gpu; then
	mg_checks
fi
