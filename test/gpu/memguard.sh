# shellcheck shell=bash
# memguard.sh - make gpu-test section memguard (sourced by gpu-test.sh):
# a tenant with a 4 GiB quota tries each escape from the device runtime,
# taking 8 GiB: LD_PRELOAD unset (a static-cudart app, and a program on
# the driver API), a copy of libcuda loaded from another path, cuMemCreate
# (VMM) with and without the interposer, and as an MPS client. Each is
# refused (the device runtime) or stopped (the agent's memory guard, from
# NVML), with the time from the overrun to the stop; a well-behaved tenant
# beside it keeps its memory and its job completes; the agent survives.
# Also measured: the driver's own memory per process beyond what the quota
# counts (the guard's contextMargin) and the guard's CPU.
MG=$W/mg
HOOK=$REPO/bin/gpuext-oci-hook GV=$REPO/bin/gpuext-gpuview AGENT=$REPO/bin/gpuext-nri-plugin
mg_quota=$((4 * GiB))
mg_interval=${GPUEXT_MG_INTERVAL:-500ms}

mg_cleanup() {
	local pids=("${mg_anchors[@]}")
	[[ -n ${mg_good:-} ]] && pids+=("$mg_good")
	kill "${pids[@]}" 2>/dev/null
	[[ -n ${mg_mps:-} ]] && CUDA_MPS_PIPE_DIRECTORY=$MG/mps-pipe CUDA_MPS_LOG_DIRECTORY=$MG/mps-log nvidia-cuda-mps-control <<<quit >/dev/null 2>&1
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done # these only: the agent still runs
	for t in "${mg_tenants[@]}"; do
		printf '{"ociVersion":"1.0.2","id":"mg-%s","status":"stopped","pid":0,"bundle":"%s"}' "$t" "$MG/bundle-$t" |
			"$HOOK" --config "$MG/config.json" poststop >>"$OUT/memguard-hook.log" 2>&1
		rmdir "$MG_CG/gpuext-mg-$t" 2>/dev/null
	done
	[[ -n ${mg_agent:-} ]] && kill "$mg_agent" 2>/dev/null && wait "$mg_agent" 2>/dev/null
	awk -v d="$MG/" 'index($2, d) == 1 {print $2}' /proc/mounts | xargs -r -n1 umount 2>/dev/null
	rm -rf /sys/fs/bpf/gpuext-gpumg
}

# mg_tenant NAME ANNOTATIONS-JSON: a cgroup with an anchor process,
# registered through the OCI hook (the agent admits it from the
# annotations); sets TID_<NAME> and the interposer env INJECT_<NAME>.
mg_tenant() {
	local name=$1 ann=$2 cg="$MG_CG/gpuext-mg-$1" before after
	mkdir -p "$cg" "$MG/bundle-$name"
	sh -c "echo \$\$ > $cg/cgroup.procs && exec sleep 100000" &
	mg_anchors+=($!)
	printf '{"ociVersion":"1.0.2","annotations":%s,"linux":{"cgroupsPath":"/gpuext-mg-%s"},"process":{"args":["x"],"cwd":"/"},"root":{"path":"/"}}\n' "$ann" "$name" >"$MG/bundle-$name/config.json"
	before=$(ls "$MG/state/tenants" 2>/dev/null)
	sleep 0.2
	printf '{"ociVersion":"1.0.2","id":"mg-%s","status":"created","pid":%d,"bundle":"%s"}' "$name" "${mg_anchors[-1]}" "$MG/bundle-$name" |
		"$HOOK" --config "$MG/config.json" prestart >>"$OUT/memguard-hook.log" 2>&1
	after=$(ls "$MG/state/tenants" 2>/dev/null)
	local id
	id=$(comm -13 <(tr ' ' '\n' <<<"$before" | sort) <(tr ' ' '\n' <<<"$after" | sort) | head -1)
	mg_tenants+=("$name")
	printf -v "TID_$name" '%s' "$id"
	printf -v "INJ_$name" '%s' "LD_PRELOAD=$LIB GPUEXT_TENANT_ID=$id GPUEXT_TENANT_DIR=$MG/state/tenants/$id GPUEXT_TENANT_CONFIG=$MG/state/tenants/$id/config.json GPUEXT_TENANT_ACCT=$MG/state/acct/$id"
}

# mg_case NAME TIMEOUT WANT(guard|runtime|either) ENV... -- CMD...: one escape in the escaper tenant
mg_case() {
	local name=$1 timeout=$2 want=$3; shift 3
	local args=() res layer
	while [[ $# -gt 0 && $1 != -- ]]; do args+=("$1"); shift; done
	shift
	res=$(python3 "$REPO/test/gpu/memguard_case.py" --cgroup "$MG_CG/gpuext-mg-escaper" --quota "$mg_quota" --timeout "$timeout" "${args[@]}" -- "$@" 2>&1 | tail -1)
	echo "$name $res" >>"$OUT/memguard-cases.txt"
	layer=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("layer","?"))' "$res" 2>/dev/null)
	local stop
	stop=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r.get("over_to_stop_ms","-"))' "$res" 2>/dev/null)
	if [[ $layer == memory-guard && $want != runtime ]] || [[ $layer == device-runtime && $want != guard ]]; then
		ok "memguard-$name"
		info "memguard-$name layer=$layer over_to_stop_ms=$stop"
	else
		bad "memguard-$name" "layer=$layer, want $want: $(head -c 400 <<<"$res")"
	fi
}

if [[ -x $HOOK && -x $GV && -x $AGENT && -x $W/apps_static ]]; then
	rm -rf "$MG"; mkdir -p "$MG/state" "$MG/copy"
	mg_anchors=() mg_tenants=() mg_good="" mg_mps="" mg_agent=""
	MG_CG=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
	mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null
	if nvcc -O2 -o "$MG/escape" "$REPO/test/gpu/escape.c" -lcuda -ldl >"$OUT/memguard-build.log" 2>&1; then ok build-escape; else bad build-escape "$(tail -5 "$OUT/memguard-build.log")"; fi
	libcuda=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
	[[ -n $libcuda ]] || libcuda=$(ls /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null)
	cp -L "$libcuda" "$MG/copy/libcuda.so.1" 2>/dev/null
	printf '{"pinDir":"/sys/fs/bpf/gpuext-gpumg","stateDir":"%s","devrtDir":"%s","logFile":"%s","agentSocket":"%s","gpuview":"%s","memoryGuard":{"interval":"%s"}}\n' \
		"$MG/state" "$W/devrt" "$OUT/memguard-agent.log" "$MG/agent/agent.sock" "$GV" "$mg_interval" >"$MG/config.json"
	exec_start=$(sed -n 's/^ExecStart=//p' "$REPO/deploy/systemd/gpuext-agent.service")
	exec_start=${exec_start/\/usr\/local\/bin\/gpuext-nri-plugin/$AGENT}
	# shellcheck disable=SC2086 # the unit's command line, split as systemd does
	${exec_start/\/etc\/gpuext\/config.json/$MG/config.json} >>"$OUT/memguard-agent.log" 2>&1 &
	mg_agent=$!
	for _ in $(seq 50); do [[ -S $MG/agent/agent.sock ]] && break; sleep 0.1; done
	mg_tenant escaper '{"policy.gpuext.io":"quota","quota.gpuext.io":"4GiB"}'
	mg_tenant good '{"policy.gpuext.io":"quota","quota.gpuext.io":"4GiB"}'
	info "memguard tenants escaper=$TID_escaper good=$TID_good interval=$mg_interval"
	read -ra INJ_E <<<"$INJ_escaper"
	read -ra INJ_G <<<"$INJ_good"
	cpu0=$(awk '{print $14 + $15}' "/proc/$mg_agent/stat" 2>/dev/null); t0=$(date +%s.%N)

	# the well-behaved tenant: 3 GiB held all along, through the interposer
	sh -c "echo \$\$ > $MG_CG/gpuext-mg-good/cgroup.procs && exec env ${INJ_G[*]} $W/apps_static alloc $((3 * GiB)) hold" >"$MG/good.txt" 2>&1 &
	mg_good=$!
	for _ in $(seq 100); do grep -q meminfo "$MG/good.txt" 2>/dev/null && break; sleep 0.1; done
	base=$("$W/apps_static" compute 2>&1)

	# the driver's memory per process that the quota does not count
	sh -c "echo \$\$ > $MG_CG/gpuext-mg-good/cgroup.procs && exec $MG/escape alloc 1048576 hold" >"$MG/bare.txt" 2>&1 &
	bare=$!
	sleep 2
	"$GV" --json >"$MG/bare.json" 2>&1
	bare_used=$(python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1])) if x["pid"]==int(sys.argv[2])]; print(r[0]["usedBytes"] if r else -1)' "$MG/bare.json" "$bare" 2>/dev/null)
	kill "$bare" 2>/dev/null; wait "$bare" 2>/dev/null
	info "memguard-margin bare-driver-context nvml_used_bytes=$bare_used (1 MiB allocated)"
	# in a cgroup of no tenant: without the interposer a framework's memory
	# would count against the good tenant's quota (and be stopped)
	if python3 -c 'import torch' 2>/dev/null; then
		mkdir -p "$MG_CG/gpuext-mg-free"
		python3 - "$MG_CG/gpuext-mg-free/cgroup.procs" "$GV" >"$MG/torch-margin.txt" 2>&1 <<'EOF'
import json, os, subprocess, sys
open(sys.argv[1], "w").write(str(os.getpid()))
import torch
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda"); b = a @ a
m = torch.nn.Conv2d(64, 64, 3).cuda(); y = m(torch.randn(8, 64, 56, 56, device="cuda")); y.sum().backward()
torch.cuda.synchronize()
rows = json.loads(subprocess.run([sys.argv[2], "--json"], capture_output=True, text=True).stdout)
used = [r["usedBytes"] for r in rows if r["pid"] == os.getpid()]
res = torch.cuda.memory_reserved()
print(f"torch nvml_used_bytes={used[0] if used else -1} reserved_bytes={res} margin_bytes={(used[0] - res) if used else -1}")
EOF
		info "memguard-margin $(tail -1 "$MG/torch-margin.txt")"
		rmdir "$MG_CG/gpuext-mg-free" 2>/dev/null
	fi

	# the escapes (8 GiB in two steps of 4 GiB, or refused)
	G4=$((4 * GiB))
	mg_case nopreload-cudart-static 15 guard --unset LD_PRELOAD -- "$W/apps_static" alloc "$G4" "$G4" hold
	mg_case nopreload-driver-api 15 guard -- "$MG/escape" alloc "$G4" alloc "$G4" hold
	mg_case libcuda-copy 15 either "${INJ_E[@]/#/--env=}" -- "$MG/escape" --lib "$MG/copy/libcuda.so.1" alloc "$G4" alloc "$G4" hold
	mg_case vmm-interposed 8 either "${INJ_E[@]/#/--env=}" -- "$MG/escape" create "$G4" create "$G4" hold
	mg_case vmm-nopreload 15 guard -- "$MG/escape" create "$G4" create "$G4" hold
	if command -v nvidia-cuda-mps-control >/dev/null; then
		mkdir -p "$MG/mps-pipe" "$MG/mps-log"
		CUDA_MPS_PIPE_DIRECTORY=$MG/mps-pipe CUDA_MPS_LOG_DIRECTORY=$MG/mps-log nvidia-cuda-mps-control -d && mg_mps=1
		mg_case mps-client-nopreload 20 guard --env=CUDA_MPS_PIPE_DIRECTORY="$MG/mps-pipe" --env=CUDA_MPS_LOG_DIRECTORY="$MG/mps-log" -- "$W/apps_static" alloc "$G4" "$G4" hold
		CUDA_MPS_PIPE_DIRECTORY=$MG/mps-pipe CUDA_MPS_LOG_DIRECTORY=$MG/mps-log nvidia-cuda-mps-control <<<quit >/dev/null 2>&1
		mg_mps=""
	fi

	# the bystander: its memory and its agent are intact, a job of its tenant completes
	if kill -0 "$mg_good" 2>/dev/null && grep -q "alloc $((3 * GiB)) ok" "$MG/good.txt"; then ok memguard-bystander-holds; else bad memguard-bystander-holds "the good tenant's holder died: $(cat "$MG/good.txt")"; fi
	job=$(python3 "$REPO/test/gpu/memguard_case.py" --cgroup "$MG_CG/gpuext-mg-good" --quota "$((64 * GiB))" --timeout 60 "${INJ_G[@]/#/--env=}" -- "$W/apps_static" compute 2>&1 | tail -1)
	if python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["rc"]==0 and r["lines"] and r["lines"][-1]==sys.argv[2] else 1)' "$job" "$base"; then
		ok memguard-bystander-job
	else
		bad memguard-bystander-job "want '$base': $(head -c 300 <<<"$job")"
	fi
	if kill -0 "$mg_agent" 2>/dev/null; then ok memguard-agent-alive; else bad memguard-agent-alive "the agent exited: $(tail -5 "$OUT/memguard-agent.log")"; fi
	kills=$(grep -c 'process stopped (SIGKILL)' "$OUT/memguard-agent.log")
	wrong=$(grep 'process stopped (SIGKILL)' "$OUT/memguard-agent.log" | grep -vc "\"tenant\":$TID_escaper,")
	if [[ $kills -gt 0 && $wrong -eq 0 ]]; then ok memguard-only-the-escaper; else bad memguard-only-the-escaper "kills=$kills, of another tenant: $wrong"; fi
	cpu1=$(awk '{print $14 + $15}' "/proc/$mg_agent/stat" 2>/dev/null); t1=$(date +%s.%N)
	gvpid=$(pgrep -P "$mg_agent" -f 'gpuext-gpuview --watch' | head -1)
	gvcpu=$([[ -n $gvpid ]] && awk '{print $14 + $15}' "/proc/$gvpid/stat" || echo 0)
	info "memguard-cpu agent_pct_of_core=$(python3 -c "print(round(100*($cpu1-$cpu0)/$(getconf CLK_TCK)/($t1-$t0),3))") gpuview_ticks=$gvcpu (whole section, agent and its gpuview; interval $mg_interval)"
	# NVML's per-cgroup limit (nvmlDeviceSetMemoryLimits_v1: NVIDIA's other way
	# to layer 1, r615+): is it in this driver, and does it hold? INFO only,
	# in a cgroup of no tenant (the guard leaves it alone).
	mkdir -p "$MG_CG/gpuext-mg-nvml"
	lim=$("$GV" --memory-limit "0:$MG_CG/gpuext-mg-nvml:$mg_quota" 2>&1)
	info "nvml-memory-limits $lim"
	if grep -q '"set":"SUCCESS"' <<<"$lim"; then
		r=$(python3 "$REPO/test/gpu/memguard_case.py" --cgroup "$MG_CG/gpuext-mg-nvml" --quota "$mg_quota" --timeout 5 -- "$MG/escape" alloc "$G4" alloc "$G4" hold 2>&1 | tail -1)
		info "nvml-memory-limits-escape $r"
	fi
	rmdir "$MG_CG/gpuext-mg-nvml" 2>/dev/null
	grep -h 'GPU memory quota' "$OUT/memguard-agent.log" | cut -c1-400 >"$OUT/memguard-kills.txt"
	mg_cleanup
else
	bad memguard "needs bin/gpuext-oci-hook, bin/gpuext-gpuview, bin/gpuext-nri-plugin and apps_static"
fi
