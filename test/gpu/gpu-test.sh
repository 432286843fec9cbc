#!/usr/bin/env bash
# gpu-test.sh (make gpu-test): the device runtime's checks on a real GPU.
# Runs on the GPU machine (the H200): builds the interposer with gcc and the
# CUDA apps with nvcc there, then prints one line per check:
#   PASS <check>            or   FAIL <check>: <why>
# and INFO lines with measurements (not pass/fail). Ends with "N passed, N failed".
# Needs: gcc, nvcc, a GPU, python3 with torch (optional: the torch checks FAIL without it).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
W="${GPUEXT_GPU_WORK:-$(mktemp -d /tmp/gpuext-gpu.XXXX)}"
OUT="${OUT:-$W/out}"
mkdir -p "$W/tenant" "$W/acct" "$OUT"
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
info() { echo "INFO $*"; }
GiB=$((1 << 30))

echo "[gpu] $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"

# 1. Build.
if bash "$REPO/devrt/build.sh" "$W/devrt" >"$OUT/build-devrt.log" 2>&1 && [[ -f "$W/devrt/libgpuext-devrt.so" ]]; then
	ok build-devrt
else
	bad build-devrt "see build-devrt.log"; tail -20 "$OUT/build-devrt.log"
fi
LIB="$W/devrt/libgpuext-devrt.so"
NVCC=(nvcc -O2 -arch=sm_90)
build() { # name args...
	local name=$1; shift
	if "${NVCC[@]}" -o "$W/$name" "$@" >>"$OUT/build-cuda.log" 2>&1; then ok "build-$name"; else bad "build-$name" "nvcc failed (build-cuda.log)"; fi
}
build apps_static "$REPO/test/gpu/apps.cu" -cudart static
build apps_shared "$REPO/test/gpu/apps.cu" -cudart shared
build apps_ptsz "$REPO/test/gpu/apps.cu" -cudart static --default-stream per-thread
build gemm "$REPO/test/gpu/gemm.cu" -lcublas

# The tenant the interposer sees.
tenant() { # quota-bytes class
	printf '{"abiVersion":1,"tenantId":7,"policy":"gpu-test","priorityClass":"%s","quotaBytes":%s}\n' "$2" "$1" >"$W/tenant/config.json"
	rm -f "$W/acct/usage"
	INJECT=(LD_PRELOAD="$LIB" GPUEXT_TENANT_ID=7 GPUEXT_TENANT_CONFIG="$W/tenant/config.json"
		GPUEXT_TENANT_ACCT="$W/acct" GPUEXT_DEVRT_TRACE="$W/trace")
}
INJECT=() # the env admission injects (docs/injection.md), set by tenant()
run_with() { env "${INJECT[@]}" "$@"; } # runs "$@" with the interposer injected

# 2. Outputs unchanged with the interposer (no quota).
tenant 0 standard
for app in apps_static apps_shared apps_ptsz; do
	for mode in compute graph; do
		[[ -x "$W/$app" ]] || { bad "unchanged-$app-$mode" "not built"; continue; }
		want=$("$W/$app" "$mode" 2>&1); got=$(run_with "$W/$app" "$mode" 2>&1)
		if [[ "$want" == checksum* && "$got" == "$want" ]]; then ok "unchanged-$app-$mode"; else bad "unchanged-$app-$mode" "without: '$want' with: '$got'"; fi
	done
done
if [[ -x "$W/gemm" ]]; then
	want=$("$W/gemm" 2>&1); got=$(run_with "$W/gemm" 2>&1)
	if [[ "$want" == gemm_checksum* && "$got" == "$want" ]]; then ok unchanged-cublas-gemm; else bad unchanged-cublas-gemm "without: '$want' with: '$got'"; fi
fi
if [[ -s "$W/trace" ]] && grep -q 'tenant=7' "$W/trace"; then ok interposer-loaded; else bad interposer-loaded "no trace line from the library"; fi
if python3 -c 'import torch' 2>/dev/null; then
	want=$(python3 "$REPO/test/gpu/torch_check.py" 2>&1 | grep torch_checksum); got=$(run_with python3 "$REPO/test/gpu/torch_check.py" 2>&1 | grep torch_checksum)
	if [[ -n "$want" && "$got" == "$want" ]]; then ok unchanged-torch; else bad unchanged-torch "without: '$want' with: '$got'"; fi
else
	bad unchanged-torch "python3 has no torch"
fi

# 3. The quota holds exactly.
Q=$((4 * GiB))
tenant $Q standard
for app in apps_static apps_shared; do
	[[ -x "$W/$app" ]] || continue
	out=$(run_with "$W/$app" alloc $((3 * GiB)) $((2 * GiB)) $GiB 2>&1)
	echo "$out" >"$OUT/quota-$app.txt"
	a1=$(sed -n 1p <<<"$out"); a2=$(sed -n 2p <<<"$out"); a3=$(sed -n 3p <<<"$out")
	if [[ "$a1" == "alloc $((3 * GiB)) ok" && "$a2" == "alloc $((2 * GiB)) oom" && "$a3" == "alloc $GiB ok" ]]; then
		ok "quota-exact-$app"
	else
		bad "quota-exact-$app" "$(tr '\n' ';' <<<"$out")"
	fi
	tot=$(grep -o 'total=[0-9]*' <<<"$out" | cut -d= -f2); fr=$(grep -o 'free=[0-9]*' <<<"$out" | cut -d= -f2)
	if [[ "$tot" == "$Q" && "$fr" == "0" ]]; then ok "meminfo-clamped-$app"; else bad "meminfo-clamped-$app" "free=$fr total=$tot, want free=0 total=$Q"; fi
done
# Across processes of one tenant, and a killed process gives its memory back.
if [[ -x "$W/apps_static" ]]; then
	tenant $Q standard
	# A plain command in the background, so that $! is the app itself (env execs it).
	env "${INJECT[@]}" "$W/apps_static" alloc $((3 * GiB)) hold >"$OUT/holder.txt" 2>&1 &
	holder=$!
	for _ in $(seq 100); do grep -q meminfo "$OUT/holder.txt" 2>/dev/null && break; sleep 0.1; done
	second=$(run_with "$W/apps_static" alloc $((2 * GiB)) 2>&1 | head -1)
	# NVML's view of the holder (gpuext-gpuview, carried as bin/gpuext-gpuview).
	if [[ -x "$REPO/bin/gpuext-gpuview" ]]; then
		view=$("$REPO/bin/gpuext-gpuview" --json 2>&1)
		echo "$view" >"$OUT/gpuview.json"
		if grep -q "\"pid\": $holder," <<<"$view" && python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1])) if x["pid"]==int(sys.argv[2])]; sys.exit(0 if r and r[0]["usedBytes"] >= 3<<30 else 1)' "$OUT/gpuview.json" "$holder"; then
			ok nvml-process-memory
		else
			bad nvml-process-memory "gpuext-gpuview does not show pid $holder with >= 3GiB: $(head -c 300 <<<"$view")"
		fi
	fi
	kill -9 "$holder"; wait "$holder" 2>/dev/null
	if kill -0 "$holder" 2>/dev/null; then bad quota-kill9-reclaimed "holder $holder still alive"; fi
	third=$(run_with "$W/apps_static" alloc $((2 * GiB)) 2>&1 | head -1)
	if [[ "$second" == "alloc $((2 * GiB)) oom" ]]; then ok quota-across-processes; else bad quota-across-processes "second process: '$second'"; fi
	if [[ "$third" == "alloc $((2 * GiB)) ok" ]]; then ok quota-kill9-reclaimed; else bad quota-kill9-reclaimed "after kill -9: '$third'"; fi
fi
if python3 -c 'import torch' 2>/dev/null; then
	tenant $Q standard
	out=$(run_with python3 "$REPO/test/gpu/torch_check.py" $Q 2>&1)
	echo "$out" >"$OUT/torch-quota.txt"
	tot=$(grep -o 'total=[0-9]*' <<<"$out" | cut -d= -f2)
	if [[ "$tot" == "$Q" ]]; then ok torch-mem-get-info-quota; else bad torch-mem-get-info-quota "total=$tot want $Q"; fi
	if grep -q 'torch_over_quota oom' <<<"$out"; then ok torch-over-quota-oom; else bad torch-over-quota-oom "$(tr '\n' ';' <<<"$out")"; fi
fi

# 4. Launch overhead (a measurement, not a check).
if [[ -x "$W/apps_static" ]]; then
	tenant 0 standard
	for round in 1 2 3 4; do # alternate which runs first
		if (( round % 2 )); then
			a=$("$W/apps_static" launches 100000 | cut -d' ' -f2); b=$(run_with "$W/apps_static" launches 100000 | cut -d' ' -f2)
		else
			b=$(run_with "$W/apps_static" launches 100000 | cut -d' ' -f2); a=$("$W/apps_static" launches 100000 | cut -d' ' -f2)
		fi
		info "launch_overhead round=$round without_us=$a with_us=$b ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b/a}')"
	done | tee "$OUT/launch-overhead.txt"
	tenant $((64 * GiB)) standard # a quota, so every allocation is accounted
	for round in 1 2 3 4; do
		if (( round % 2 )); then
			a=$("$W/apps_static" allocs 10000 | cut -d' ' -f2); b=$(run_with "$W/apps_static" allocs 10000 | cut -d' ' -f2)
		else
			b=$(run_with "$W/apps_static" allocs 10000 | cut -d' ' -f2); a=$("$W/apps_static" allocs 10000 | cut -d' ' -f2)
		fi
		info "alloc_overhead round=$round without_us=$a with_us=$b ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b/a}')"
	done | tee "$OUT/alloc-overhead.txt"
fi

# 5. Priority (a measurement): one latency-critical process issues short
# requests while two best-effort processes run long kernels. The board is
# published by gpuextctl (carried as a static binary in bin/, if present).
prio_run() { # mode: alone | nopolicy | policy -> prints lc p50/p99 and be throughput
	local mode=$1 be_pids=() i
	rm -rf "$W/prio" && mkdir -p "$W/prio/tenants/1" "$W/prio/tenants/2" "$W/prio/acct/1" "$W/prio/acct/2" "$W/prio/board"
	printf '{"tenantId":1,"priorityClass":"latency-critical","quotaBytes":0,"activeWindowUs":%d}\n' "$LC_WINDOW_US" >"$W/prio/tenants/1/config.json"
	printf '{"tenantId":2,"priorityClass":"best-effort","quotaBytes":0,"timesliceUs":0}\n' >"$W/prio/tenants/2/config.json"
	local board_pid=""
	if [[ $mode == policy ]]; then
		printf '{"stateDir":"%s"}\n' "$W/prio" >"$W/prio/gpuext.json"
		"$GPUEXTCTL" --config "$W/prio/gpuext.json" board --interval 200us >/dev/null 2>&1 &
		board_pid=$!
		sleep 0.5
	fi
	pre() { # tenant-id -> env for that tenant (policy mode only)
		[[ $mode == policy ]] || return 0
		echo "LD_PRELOAD=$LIB GPUEXT_TENANT_CONFIG=$W/prio/tenants/$1/config.json GPUEXT_TENANT_ACCT=$W/prio/acct/$1 GPUEXT_BOARD=$W/prio/board/board"
	}
	if [[ $mode != alone ]]; then
		for i in 1 2; do
			# shellcheck disable=SC2046
			env $(pre 2) "$W/apps_static" be 12 >"$W/prio/be$i.txt" 2>&1 &
			be_pids+=($!)
		done
		sleep 1
	fi
	# shellcheck disable=SC2046
	env $(pre 1) "$W/apps_static" lc 400 5000 >"$W/prio/lc.txt" 2>&1
	for i in "${be_pids[@]}"; do wait "$i"; done
	[[ -n $board_pid ]] && kill "$board_pid" 2>/dev/null
	local p50 p99 be=0
	p50=$(awk '/lc_p50_us/ {print $2}' "$W/prio/lc.txt"); p99=$(awk '/lc_p99_us/ {print $2}' "$W/prio/lc.txt")
	[[ $mode != alone ]] && be=$(cat "$W/prio"/be*.txt | awk '/be_kernels_per_s/ {s += $2} END {print s}')
	info "priority mode=$mode lc_p50_us=$p50 lc_p99_us=$p99 be_kernels_per_s=$be"
}
# The latency-critical tenant's pending window (its timesliceUs): it must
# cover the gap between its requests (5ms here) for best-effort work to stay
# gated while the latency-critical tenant is active.
LC_WINDOW_US=${GPUEXT_LC_WINDOW_US:-6000}
GPUEXTCTL="$REPO/bin/gpuextctl"
if [[ -x "$W/apps_static" && -x "$GPUEXTCTL" ]]; then
	for w in ${GPUEXT_LC_WINDOWS_US:-$LC_WINDOW_US}; do
		LC_WINDOW_US=$w
		for mode in alone nopolicy policy; do prio_run "$mode"; done | tee "$OUT/priority-$w.txt"
		LC_WINDOW_US="$LC_WINDOW_US" awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]} m = v["mode"]; p99[m] = v["lc_p99_us"]; be[m] = v["be_kernels_per_s"]}
			END {printf "INFO priority targets (window %sus): lc p99 policy/alone=%.2f (target <= 1.5), nopolicy/policy=%.2f (target >= 2), be throughput policy/nopolicy=%.2f (target >= 0.70)\n",
				ENVIRON["LC_WINDOW_US"], p99["policy"] / p99["alone"], p99["nopolicy"] / p99["policy"], be["policy"] / be["nopolicy"]}' \
			"$OUT/priority-$w.txt" | tee -a "$OUT/priority.txt"
	done
else
	info "priority: skipped (needs bin/gpuextctl: CGO_ENABLED=0 go build -o bin/gpuextctl ./cmd/gpuextctl, and carry bin)"
fi

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
