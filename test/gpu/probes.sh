# probes.sh - the device-probe checks of make gpu-test, sourced by gpu-test.sh
# (uses its ok/bad/info, $W, $OUT, $REPO, $LIB). On the H200: real nvcc apps,
# the interposer splicing probes compiled by gpuextctl (a static Go binary
# carried in bin/), counts read back with `gpuextctl probes --json`.
#
# Checks (PASS/FAIL):
#   probes-unchanged-APP   output identical with the probes spliced in
#   probes-count-APP       launch-stats counts exactly the launches and blocks
#                          the app launched; sm-histogram's total = blocks
#   probes-sass-only       a SASS-only image loads unmodified, reported sass-only,
#                          its 4 launches counted host-side
#   probes-bound-second-context one image run in two contexts of the GPU is
#                          bound in the second too (twoctx.cu); with
#                          probes-count-twoctx, every launch counted once
#   probes-device-reset    the same app destroying its second context and
#                          then calling cudaDeviceReset: exits 0, every launch
#                          of both contexts counted, both images unbound
#                          before their contexts ended
#   probes-torch-graph-capture a torch CUDA graph captured while the copy
#                          thread runs: same result with the probes
#   probes-launch-time     every launch carries the host launch time
#   probes-launch-latency  the clock offset was measured at bind and the
#                          latency is measured for >= 18 of 20 launches
#   probes-sdk-block-hist  the example probe kernel-block-hist (examples/probes,
#                          built with the SDK, loaded from a probeDir) counts
#                          every block of the vector add once in its hash
#   probes-sdk-slow-blocks the example probe slow-blocks' ring-buffer records
#                          agree with the blocks the histogram puts over 10 us
#   probes-bpftime-*       bpftime-style programs from a probe directory, exact
#                          counts (test/gpu/probes_bpftime.sh, GPUEXT_PROBE_CHECKS=bpftime)
#   probes-hash-concurrency the helpers' hash map under contention (hash_stress.cu)
#   probes-hash-storm      every thread of 64 blocks updating its block's key in a
#                          hash of exactly 64 entries: every update 0, all 64 keys
#                          live (hash_storm.cu, bpftime's cuda-counter shape)
#   probe-diff             the differential corpus on the GPU = the kernel's eBPF
# Measurements (INFO): probe overhead (launch-count, launch-stats) on a ~5 us
# kernel and on a large GEMM,
# load-time patch + JIT cost per module.
GX=$REPO/bin/gpuextctl
PT=$W/probes
# GPUEXT_PROBE_CHECKS picks checks (default all)
pwant() { [[ " ${GPUEXT_PROBE_CHECKS:-vecadd latency sass sgemm twoctx torch overhead resources sdk bpftime hash diff} " == *" $1 "* ]]; }
NVCCP=(nvcc -O2 -arch=sm_90)

info "libzstd for nvcc 13's compressed PTX: $(ldconfig -p | grep -c 'libzstd.so.1 ') found"
pbuild() { # name args...
	local name=$1; shift
	if "${NVCCP[@]}" -o "$W/$name" "$@" >>"$OUT/build-probes.log" 2>&1; then ok "build-$name"; else bad "build-$name" "nvcc failed (build-probes.log)"; fi
}
pbuild vecadd "$REPO/test/gpu/vecadd.cu"
pbuild vecadd_nc "$REPO/test/gpu/vecadd.cu" --compress-mode=none
NVCCP=(nvcc -O2 -gencode arch=compute_90,code=sm_90); pbuild vecadd_sass "$REPO/test/gpu/vecadd.cu"; NVCCP=(nvcc -O2 -arch=sm_90)
pbuild probeapps "$REPO/test/gpu/probeapps.cu"
pbuild twoctx "$REPO/test/gpu/twoctx.cu" -lcuda

# ptenant ID PROBES [--kernel NAME...]: a tenant dir with compiled probes
ptenant() {
	local id=$1 set=$2; shift 2
	mkdir -p "$PT/tenants/$id" "$PT/acct/$id"
	chmod 1777 "$PT/acct/$id"
	rm -rf "$PT/acct/$id/probes"
	"$GX" settings write --dir "$PT/tenants/$id" --tenant "$id" --policy gpu-test --probes "$set"
	"$GX" probes compile --out "$PT/tenants/$id/probes" "$@" "$set" >>"$OUT/probes-compile.log" 2>&1 ||
		{ bad "probes-compile-$id" "gpuextctl probes compile failed (probes-compile.log)"; return 1; }
}
prun() { # ID cmd... : run with the interposer and tenant ID's probes
	local id=$1; shift
	env LD_PRELOAD="$LIB" GPUEXT_TENANT_ID="$id" GPUEXT_TENANT_DIR="$PT/tenants/$id" \
		GPUEXT_TENANT_CONFIG="$PT/tenants/$id/config.json" GPUEXT_TENANT_ACCT="$PT/acct/$id" "$@"
}
pfield() { # ID jq-like path over gpuextctl probes --json: prints the value for tenant ID
	"$GX" probes --state-dir "$PT" --json | python3 -c '
import json, sys
rows = {r["tenant"]: r for r in json.load(sys.stdin)}
r = rows.get(int(sys.argv[1]), {})
for k in sys.argv[2].split("."):
    r = r.get(k) if isinstance(r, dict) else None
print("" if r is None else (json.dumps(r) if isinstance(r, (dict, list)) else r))' "$1" "$2"
}
# pcheck NAME ID WANT_LAUNCHES WANT_BLOCKS: the device probes' own counts
# (launchesBy.device, blocksBy.device). The tenant's launches and blocks
# also hold the host's counts of kernels no probe saw (a framework's
# SASS-only kernels beside the app's), which the app's grid line leaves out.
pcheck() {
	local name=$1 id=$2 wl=$3 wb=$4 l b t p all
	l=$(pfield "$id" launchesBy.device); b=$(pfield "$id" blocksBy.device); t=$(pfield "$id" sms.total); p=$(pfield "$id" patched)
	all="launches $(pfield "$id" launches) blocks $(pfield "$id" blocks) with host-side $(pfield "$id" launchesBy.host) $(pfield "$id" blocksBy.host)"
	"$GX" probes --state-dir "$PT" >"$OUT/probes-$name.txt" 2>&1
	cat "$PT/acct/$id/probes/"*.status >>"$OUT/probes-$name.txt" 2>/dev/null
	# the app's own grid line gave the wants (empty: it failed), and every
	# caller selects sm-histogram: its total must be there and equal too
	if [[ -n $wl && -n $wb && $l == "$wl" && $b == "$wb" && $t == "$wb" && ${p:-0} -ge 1 ]]; then
		ok "probes-count-$name"
	else
		bad "probes-count-$name" "device-side launches=$l (want $wl) blocks=$b (want $wb) sm-total=$t patched=$p; $all (probes-$name.txt)"
	fi
}
punchanged() { # NAME want got
	if [[ -n $2 && $2 == "$3" ]]; then ok "probes-unchanged-$1"; else bad "probes-unchanged-$1" "without: '$2' with: '$3'"; fi
}

# vector add: 10 x (vadd + vscale), 4096 blocks each
for app in vecadd vecadd_nc; do
	pwant vecadd || continue
	[[ -x $W/$app ]] || continue
	id=$([[ $app == vecadd ]] && echo 31 || echo 32)
	ptenant "$id" launch-stats,sm-histogram || continue
	want=$("$W/$app" 1048576 10 | head -1); got=$(prun "$id" "$W/$app" 1048576 10 2>"$OUT/probes-$app.err" | head -1)
	punchanged "$app" "$want" "$got"
	pcheck "$app" "$id" 20 $((4096 * 20))
done
# launch-latency: the interposer writes the host launch time before each
# launch (cuStreamWriteValue64); every launch is measured or counted as
# unmeasurable (device clock behind the host's).
if pwant latency && [[ -x $W/vecadd_nc ]] && ptenant 37 launch-latency; then
	prun 37 "$W/vecadd_nc" 1048576 10 >/dev/null 2>"$OUT/probes-latency.err"
	"$GX" probes --state-dir "$PT" --json >"$OUT/probes-latency.json" 2>&1
	read -r n nolt behind p50 p99 < <(python3 -c '
import json, sys
r = [x for x in json.load(open(sys.argv[1])) if x["tenant"] == 37][0]
d = [p for p in r["details"] if p["name"] == "launch-latency"][0]
h, c = d.get("histograms", {}).get("lat_hist", {}), d.get("counters", {})
print(h.get("count", 0), c.get("noLaunchTime", 0), c.get("clockBehind", 0), h.get("p50", 0), h.get("p99", 0))' "$OUT/probes-latency.json")
	info "launch_latency launches=20 measured=$n no_launch_time=$nolt clock_behind=$behind p50_ns=$p50 p99_ns=$p99"
	# every launch carried its host launch time (the interposer's part)
	if [[ $((n + nolt + behind)) == 20 && $nolt == 0 ]]; then ok probes-launch-time; else bad probes-launch-time "measured=$n no_launch_time=$nolt clock_behind=$behind of 20 launches (probes-latency.json)"; fi
	# and the latency could be computed for (nearly) every launch: the
	# interposer measured %globaltimer - CLOCK_REALTIME (status clock= lines)
	# and wrote launch times in the device's clock
	grep -h ' clock=' "$PT/acct/37/probes/"*.status | sed 's/^/INFO launch_latency /'
	synced=$(cat "$PT/acct/37/probes/"*.status | grep -c ' clock=synced why=bind')
	if (( n >= 18 && synced >= 1 )); then ok "probes-launch-latency ($n of 20 measured, p50 ${p50} ns)"
	else bad probes-launch-latency "$n of 20 launches measured, $behind with the device clock behind; clock synced at bind: ${synced:-0}"; fi
fi
# SASS-only: loads unmodified, reported
if pwant sass && [[ -x $W/vecadd_sass ]] && ptenant 33 launch-stats; then
	want=$("$W/vecadd_sass" 1048576 2 | head -1); got=$(prun 33 "$W/vecadd_sass" 1048576 2 2>/dev/null | head -1)
	reasons=$(pfield 33 unpatchedReasons)
	# nothing patched, but every launch counted host-side (2 iterations of vadd + vscale)
	if [[ -n $want && $want == "$got" && $reasons == *sass* && $(pfield 33 launches) == 4 ]]; then ok probes-sass-only
	else bad probes-sass-only "without '$want' with '$got' unpatched=$reasons launches=$(pfield 33 launches)"; fi
fi
# a GEMM: 1024 x 1024 tiled SGEMM, 32 x 32 blocks, 5 launches
if pwant sgemm && [[ -x $W/probeapps ]] && ptenant 34 launch-stats,sm-histogram; then
	want=$("$W/probeapps" sgemm 1024 5 | head -1); got=$(prun 34 "$W/probeapps" sgemm 1024 5 2>"$OUT/probes-sgemm.err" | head -1)
	punchanged sgemm "$want" "$got"
	pcheck sgemm 34 5 $((32 * 32 * 5))
fi
# launch-count alone, which counts launches and blocks at kernel exit only:
# the same SGEMM, exact counts, output unchanged
if pwant sgemm && [[ -x $W/probeapps ]] && ptenant 44 launch-count; then
	want=$("$W/probeapps" sgemm 1024 5 | head -1); got=$(prun 44 "$W/probeapps" sgemm 1024 5 2>"$OUT/probes-sgemm-lc.err" | head -1)
	punchanged sgemm-launch-count "$want" "$got"
	l=$(pfield 44 launches); b=$(pfield 44 blocks); p=$(pfield 44 patched)
	if [[ $l == 5 && $b == $((32 * 32 * 5)) && ${p:-0} -ge 1 ]]; then ok probes-count-sgemm-launch-count
	else bad probes-count-sgemm-launch-count "launches=$l (want 5) blocks=$b (want $((32 * 32 * 5))) patched=$p"; fi
fi
# one image in two contexts of the GPU (the primary one, then one made with
# cuCtxCreate): bound in each, every launch counted once, outputs unchanged
if pwant twoctx && [[ -x $W/twoctx ]] && ptenant 40 launch-stats,sm-histogram; then
	want=$("$W/twoctx" 1048576 5); got=$(prun 40 "$W/twoctx" 1048576 5 2>"$OUT/probes-twoctx.err")
	punchanged twoctx "$(echo "$want" | grep checksum)" "$(echo "$got" | grep checksum)"
	read -r launches blocks < <(echo "$want" | awk '/twoctx grid/ {for (i = 3; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]} print v["launches"], v["blocks"]}')
	pcheck twoctx 40 "$launches" "$blocks"
	nb=$(cat "$PT/acct/40/probes/"*.status 2>/dev/null | grep -c 'ctx=[1-9][0-9]* state=bound context=')
	info "probes_twoctx bound_lines=$nb maps_files=$(ls "$PT/acct/40/probes/"*.maps 2>/dev/null | wc -l)"
	if (( nb >= 1 )); then ok probes-bound-second-context; else bad probes-bound-second-context "no state=bound line for the created context (probes-twoctx.txt)"; fi
fi
# the same, then cudaDeviceReset (the primary context ends before exit):
# cudart asks for cuDevicePrimaryCtxReset by its CUDA 7 version and resets
# the primary context before it unloads its library; the interposer wraps
# that variant too, so the primary context's image gets its final copy
# before the reset. Every launch counted, both images unbound before their
# contexts went, a clean exit.
if pwant twoctx && [[ -x $W/twoctx ]] && ptenant 41 launch-stats,sm-histogram; then
	want=$("$W/twoctx" 1048576 5 reset); got=$(prun 41 "$W/twoctx" 1048576 5 reset 2>"$OUT/probes-twoctx-reset.err"); rc=$?
	punchanged twoctx-reset "$(echo "$want" | grep checksum)" "$(echo "$got" | grep checksum)"
	st=$(cat "$PT/acct/41/probes/"*.status 2>/dev/null)
	ended=$(grep -c 'state=unbound reason=primary-context-ended' <<<"$st")
	missed=$(grep -c 'final=missed' <<<"$st")
	destroyed=$(grep -c 'state=unbound reason=context-destroyed' <<<"$st")
	l=$(pfield 41 launches)
	info "probes_device_reset rc=$rc launches=$l of 10 primary_context_ended=$ended final_missed=$missed context_destroyed=$destroyed"
	if [[ $rc == 0 && $l == 10 && $ended -ge 1 && $destroyed -ge 1 && $missed == 0 ]]; then ok "probes-device-reset (launches $l of 10)"
	else bad probes-device-reset "rc=$rc launches=$l (want 10) primary-context-ended=$ended final=missed:$missed context-destroyed=$destroyed (probes-twoctx-reset.err)"; fi
fi
# PyTorch: three kernels of an extension built with nvcc -arch=sm_90 (its
# fatbin carries PTX), called from a torch script; the probes are limited to
# the extension's kernels (--kernel), so torch's own images load as they are.
if pwant torch && python3 -c 'import torch' 2>/dev/null; then
	mkdir -p "$W/torchext"
	want=$(python3 "$REPO/test/gpu/torch_probes.py" "$W/torchext" 2>"$OUT/torch-probes-build.log" | grep '^torch_probes')
	kern=(--kernel _Z5k_addPKfS0_Pfi --kernel _Z6k_reluPfi --kernel _Z7k_scalePffi)
	if ptenant 35 launch-stats,sm-histogram "${kern[@]}"; then
		got=$(prun 35 python3 "$REPO/test/gpu/torch_probes.py" "$W/torchext" 2>"$OUT/probes-torch.err" | grep '^torch_probes')
		punchanged torch "$(echo "$want" | grep checksum)" "$(echo "$got" | grep checksum)"
		read -r launches blocks < <(echo "$want" | awk '/torch_probes_grid/ {for (i = 2; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]} print v["launches"], v["blocks"]}')
		pcheck torch 35 "$launches" "$blocks"
		# a CUDA graph captured (GLOBAL mode) while the copy thread runs: the
		# interposer's calls must not invalidate the application's capture
		want=$(python3 "$REPO/test/gpu/torch_probes.py" "$W/torchext" graph 2>/dev/null | grep '^torch_probes_graph')
		got=$(prun 35 python3 "$REPO/test/gpu/torch_probes.py" "$W/torchext" graph 2>"$OUT/probes-torch-graph.err" | grep '^torch_probes_graph')
		if [[ $want == "torch_probes_graph ok"* && $got == "$want" ]]; then ok probes-torch-graph-capture
		else bad probes-torch-graph-capture "without probes '$want', with '$got' (probes-torch-graph.err)"; fi
	fi
fi

# Overhead of the entry + exit probes on a ~5 us kernel and on a 4096 x 4096
# SGEMM: launch-count (counts only) and launch-stats (counts + two timer
# reads); GPU time per kernel, without / with, in one run, order rotated.
if pwant overhead && [[ -x $W/probeapps ]] && ptenant 36 launch-stats && ptenant 45 launch-stats && ptenant 38 launch-count; then
	# 45: launch-stats with its entry block at the body's first statement
	# (module.conf entry_late 0), beside 36's default (after the first global load)
	echo "entry_late 0" >>"$PT/tenants/45/probes/module.conf"
	# the interposer alone (a tenant without probes) beside them: its host-side hooks are not the probes' cost
	mkdir -p "$PT/tenants/39" "$PT/acct/39" && chmod 1777 "$PT/acct/39"
	"$GX" settings write --dir "$PT/tenants/39" --tenant 39 --policy gpu-test
	for round in $(seq "${GPUEXT_PROBE_ROUNDS:-3}"); do
		for what in "small ${GPUEXT_PROBE_SMALL_ITERS:-100000}" "gemm 4096 20"; do
			declare -A us=()
			order=(none 39 36 45 38); (( round % 5 == 2 )) && order=(39 36 45 38 none); (( round % 5 == 3 )) && order=(36 45 38 none 39)
			(( round % 5 == 4 )) && order=(45 38 none 39 36); (( round % 5 == 0 )) && order=(38 none 39 36 45)
			for t in "${order[@]}"; do
				if [[ $t == none ]]; then us[$t]=$("$W/probeapps" bench $what | awk '{print $2}')
				else us[$t]=$(prun "$t" "$W/probeapps" bench $what 2>/dev/null | awk '{print $2}'); fi
			done
			info "probe_overhead kernel=${what%% *} round=$round without_us=${us[none]} interposer_us=${us[39]} launch_count_us=${us[38]} launch_stats_us=${us[36]} launch_stats_first_us=${us[45]} count_ratio=$(awk -v a="${us[none]}" -v b="${us[38]}" 'BEGIN{printf "%.4f", b/a}') stats_ratio=$(awk -v a="${us[none]}" -v b="${us[36]}" 'BEGIN{printf "%.4f", b/a}') stats_first_ratio=$(awk -v a="${us[none]}" -v b="${us[45]}" 'BEGIN{printf "%.4f", b/a}')"
			unset us
		done
	done | tee "$OUT/probe-overhead.txt"
	grep -h 'state=patched' "$PT/acct/36/probes/"*.status "$PT/acct/38/probes/"*.status | head -2 | sed 's/^/INFO probe_overhead status /'
fi
# The probe shapes by hand, in one process (test/gpu/probe_cost.cu): what
# each piece of an entry+exit probe costs the ~5 us kernel; beside them the
# same kernel as the splice leaves it (probeapps.cu's PTX through
# ptxpatch_cli with tenants 36, 45 and 38's modules: ptx:launch-stats.ptx,
# ptx:launch-stats-first.ptx, ptx:launch-count.ptx), JIT-compiled by the
# driver as the interposer's are, with their counts checked
# (probe-cost-counts).
if pwant overhead && nvcc -O2 -arch=sm_90 -o "$W/probe_cost" "$REPO/test/gpu/probe_cost.cu" -lcuda >>"$OUT/build-probes.log" 2>&1; then
	mods=()
	if nvcc -O2 -arch=sm_90 -ptx -o "$W/probeapps.ptx" "$REPO/test/gpu/probeapps.cu" 2>>"$OUT/build-probes.log"; then
		for tm in 36:launch-stats 45:launch-stats-first 38:launch-count; do
			d=$PT/tenants/${tm%%:*}/probes
			[[ -f $d/module.conf ]] && "$W/devrt/ptxpatch_cli" -c "$d/module.conf" "$d/module.ptx" "$W/probeapps.ptx" >"$W/${tm#*:}.ptx" 2>>"$OUT/build-probes.log" &&
				mods+=("$W/${tm#*:}.ptx")
		done
	fi
	"$W/probe_cost" 12 20000 "${mods[@]}" | tee -a "$OUT/probe-overhead.txt"
	# the spliced kernels counted every launch and block exactly: two lines
	# per module (the timed rounds, the short launches), none missing
	nc=0
	while read -r _ _ variant counts rest; do
		name=${variant#variant=ptx:}; name=${name/.ptx/}
		nc=$((nc + 1))
		if [[ $counts == counts=exact ]]; then ok "probes-cost-counts-$name"; else bad "probes-cost-counts-$name" "$counts $rest"; fi
	done < <(grep -h '^INFO probe_cost_counts' "$OUT/probe-overhead.txt")
	(( ${#mods[@]} == 3 && nc == 6 )) || bad probes-cost-counts "${#mods[@]} of 3 spliced modules made, $nc of 6 count lines (build-probes.log, probe-overhead.txt)"
fi
# What the splice costs in resources: ptxas -v on the apps' PTX with and without it.
if pwant resources && [[ -d $PT/tenants/36/probes ]] &&
	{ [[ -f $W/probeapps.ptx ]] || nvcc -O2 -arch=sm_90 -ptx -o "$W/probeapps.ptx" "$REPO/test/gpu/probeapps.cu" 2>>"$OUT/build-probes.log"; } &&
	"$W/devrt/ptxpatch_cli" -c "$PT/tenants/36/probes/module.conf" "$PT/tenants/36/probes/module.ptx" "$W/probeapps.ptx" >"$W/probeapps.patched.ptx" 2>>"$OUT/build-probes.log"; then
	fs="probeapps probeapps.patched"
	if [[ -d $PT/tenants/38/probes ]] && "$W/devrt/ptxpatch_cli" -c "$PT/tenants/38/probes/module.conf" "$PT/tenants/38/probes/module.ptx" "$W/probeapps.ptx" >"$W/probeapps.count.ptx" 2>>"$OUT/build-probes.log"; then
		fs="$fs probeapps.count" # launch-count's splice
	fi
	for f in $fs; do
		ptxas -v -arch=sm_90 -o "$W/$f.cubin" "$W/$f.ptx" 2>&1 | awk -v f="$f" '/Compiling entry function/ {e = $NF} /Used/ {print "INFO probe_resources " f " " e " " $0}' | sed "s/'//g"
		# the SASS of each kernel: instructions, and the memory operations the probe could wait on
		cuobjdump -sass "$W/$f.cubin" >"$OUT/$f.sass" 2>&1
		awk -v f="$f" '/Function :/ {if (k) print "INFO probe_sass " f " " k " insns=" n " LDG=" g " STG=" s " RED=" r " ATOM=" a " LDL=" ll " STL=" sl " globaltimer=" t; k=$3; n=g=s=r=a=ll=sl=t=0; next}
			/\/\*[0-9a-f]+\*\// {n++} / LDG/ {g++} / STG/ {s++} / RED/ {r++} / ATOM/ {a++} / LDL/ {ll++} / STL/ {sl++} /GLOBALTIMER/ {t++}
			END {if (k) print "INFO probe_sass " f " " k " insns=" n " LDG=" g " STG=" s " RED=" r " ATOM=" a " LDL=" ll " STL=" sl " globaltimer=" t}' "$OUT/$f.sass"
	done | tee "$OUT/probe-resources.txt"
fi
# Load-time cost: the patch + JIT of each patched module, from the status files.
cat "$PT"/acct/*/probes/*.status 2>/dev/null | awk '/state=patched/ {print "INFO probe_load", $0}' | sort -u | head -12

# The example probes of examples/probes (not in the catalog), built here by
# `make gpu-prep` with the SDK into out/gpu/probedir and loaded from it as
# the config's probeDir: kernel-block-hist (a hash of log2 block times per
# kernel) and slow-blocks (a ring buffer of blocks over 10 us) on the vector
# add (10 x vadd + vscale, 4096 blocks each). The hash must count every
# block exactly once; the ring buffer's records (kept + dropped) must match
# the blocks the histogram puts over 10 us (buckets 15 and up surely are,
# bucket 14, [8192, 16384) ns, may be).
if pwant sdk && [[ -x $W/vecadd_nc ]]; then
	if [[ ! -f $REPO/out/gpu/probedir/kernel-block-hist.bpf.o ]]; then
		bad probes-sdk-examples "needs out/gpu/probedir (make gpu-prep here, carry out/gpu)"
	else
		printf '{"probeDir": "%s"}\n' "$REPO/out/gpu/probedir" >"$W/probedir-config.json"
		export GPUEXT_CONFIG=$W/probedir-config.json
		if ptenant 39 kernel-block-hist,slow-blocks; then
			want=$("$W/vecadd_nc" 1048576 10 | head -1); got=$(prun 39 "$W/vecadd_nc" 1048576 10 2>"$OUT/probes-sdk.err" | head -1)
			punchanged sdk-examples "$want" "$got"
			"$GX" probes --state-dir "$PT" >"$OUT/probes-sdk.txt" 2>&1
			"$GX" probes --state-dir "$PT" --json >"$OUT/probes-sdk.json" 2>&1
			read -r blocks keys surely maybe recs dropped badrec < <(python3 -c '
import json, sys
r = [x for x in json.load(open(sys.argv[1])) if x["tenant"] == 39][0]
d = {p["name"]: p for p in r["details"]}
h = d["kernel-block-hist"].get("hashes", {}).get("kbh_hist", {})
rb = d["slow-blocks"].get("records", {}).get("sb_records", {})
top = h.get("top", [])
surely = sum(e["value"]["blocks"] for e in top if e["key"]["bucket"] >= 15)
maybe = sum(e["value"]["blocks"] for e in top if e["key"]["bucket"] >= 14)
bad = sum(1 for x in rb.get("last", []) if x["ns"] <= 10000)
print(h.get("sums", {}).get("blocks", 0), h.get("keys", 0), surely, maybe, rb.get("count", 0), rb.get("dropped", 0), bad)' "$OUT/probes-sdk.json")
			info "probe_sdk blocks=$blocks keys=$keys over10us_surely=$surely over10us_maybe=$maybe records=$recs dropped=$dropped"
			if [[ $blocks == $((4096 * 20)) && ${keys:-0} -ge 2 ]]; then ok probes-sdk-block-hist
			else bad probes-sdk-block-hist "blocks=$blocks (want $((4096 * 20))) keys=$keys (probes-sdk.txt)"; fi
			n=$((recs + dropped))
			# Selected together, each probe's block time includes the other's
			# exit program (kernel-block-hist's hash update is there, several
			# us under contention), so the two do not bound each other: every
			# record is of a block over 10 us, and there are no more than blocks.
			if [[ -n $recs && $badrec == 0 ]] && (( n > 0 && n <= blocks )); then ok probes-sdk-slow-blocks
			else bad probes-sdk-slow-blocks "records+dropped=$n of $blocks blocks (the histogram has $surely..$maybe over 10 us), $badrec shown records not over it (probes-sdk.txt)"; fi
		fi
		unset GPUEXT_CONFIG
	fi
fi

# The helper library's hash map under contention on the GPU (hash_stress.cu
# includes helpers.cu): no key twice, the live count right, max_entries kept.
if pwant hash; then
	if nvcc -O2 -arch=sm_90 -I"$REPO/kmod/include" -o "$W/hash_stress" "$REPO/test/gpu/hash_stress.cu" >>"$OUT/build-probes.log" 2>&1; then
		line=$("$W/hash_stress" "${GPUEXT_HASH_LAUNCHES:-2000}" 2>&1 | tail -1)
		info "probe_hash $line"
		if [[ $line == PASS* ]]; then ok probes-hash-concurrency; else bad probes-hash-concurrency "${line#FAIL hash-stress: }"; fi
	else
		bad probes-hash-concurrency "nvcc failed (build-probes.log)"
	fi
	# bpftime's cuda-counter storm (hash_storm.cu): every thread of 64 blocks
	# updates its block's key in a hash of exactly 64 entries; all 64 land.
	if nvcc -O2 -arch=sm_90 -I"$REPO/kmod/include" -o "$W/hash_storm" "$REPO/test/gpu/hash_storm.cu" >>"$OUT/build-probes.log" 2>&1; then
		line=$("$W/hash_storm" 10 2>&1 | tail -1)
		info "probe_hash_storm $line"
		if [[ $line == PASS* ]]; then ok probes-hash-storm; else bad probes-hash-storm "${line#FAIL hash-storm: }"; fi
	else
		bad probes-hash-storm "nvcc failed (build-probes.log)"
	fi
fi

# The differential corpus (built here by `make gpu-prep`: the kernel's own
# eBPF results) through the translator's PTX on the GPU.
if ! pwant diff; then
	:
elif [[ -f $REPO/out/gpu/corpus/corpus.txt.gz ]]; then
	mkdir -p "$W/corpus"
	for f in corpus.txt corpus.ptx; do gunzip -c "$REPO/out/gpu/corpus/$f.gz" >"$W/corpus/$f"; done
	if nvcc -O2 -arch=sm_90 -o "$W/probe_diff" "$REPO/test/gpu/probe_diff.cu" -lcuda >>"$OUT/build-probes.log" 2>&1; then
		"$W/probe_diff" "$W/corpus" >"$OUT/probe-diff.txt" 2>&1; rc=$?
		n=$(awk '/^PASS probe-diff/ {print $3}' "$OUT/probe-diff.txt")
		if [[ $rc == 0 && ${n:-0} -ge 100 ]]; then ok "probe-diff ($n programs)"
		else bad probe-diff "$(grep -m3 -v '^PASS' "$OUT/probe-diff.txt" | tr '\n' ' ')"; fi
	else
		bad probe-diff "nvcc failed (build-probes.log)"
	fi
else
	bad probe-diff "no out/gpu/corpus: run make gpu-prep on a machine with Go (as root) and carry out/gpu"
fi

# bpftime-style programs from a probe directory, and bpftime's own objects
# when out/bpftime has them (test/gpu/probes_bpftime.sh)
if pwant bpftime; then
	# shellcheck source=test/gpu/probes_bpftime.sh
	source "$REPO/test/gpu/probes_bpftime.sh"
fi
