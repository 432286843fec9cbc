# probe_coverage.sh - every kernel observed, the way it can be (make gpu-test
# section probe-coverage, sourced by gpu-test.sh: uses its ok/bad/info, $W,
# $OUT, $REPO, $LIB). A PyTorch transformer forward pass, eager and replayed
# from a CUDA graph, under the interposer with launch-count selected: its
# images are SASS-only (or PTX newer than sm_90), so nothing is patched, and
# the interposer's launch table (<pid>.launches, read by gpuextctl probes
# read --json) must count every launch, each labelled device or host.
#
# Checks (PASS/FAIL):
#   probes-coverage-unchanged  the model's output is the same with the interposer
#   probes-coverage-eager      N more eager forwards add exactly N x the kernels
#                              of one forward (torch.profiler's count when it
#                              runs, else the runs' own: 10 forwards add twice
#                              what 5 add); nothing unobserved
#   probes-coverage-graph      R more graph replays add exactly R x the graph's
#                              kernel nodes (the profiler's count of one
#                              replay), counted as graph launches; nothing unobserved
#   probes-coverage-labelled   every launch is in a device or host class, the
#                              observed share is 100%
#   probes-coverage-latency    with launch-latency too: host-measured
#                              launch-to-completion latency for some launches
# INFO: the classes and reasons, the top kernels, the latency percentiles.
GX=$REPO/bin/gpuextctl
CV=$W/coverage
PY=(python3 "$REPO/test/gpu/coverage_torch.py")

# ctenant ID PROBES: a tenant dir with compiled probes and an empty acct dir
ctenant() {
	mkdir -p "$CV/tenants/$1" "$CV/acct/$1"
	chmod 1777 "$CV/acct/$1"
	rm -rf "$CV/acct/$1/probes"
	"$GX" settings write --dir "$CV/tenants/$1" --tenant "$1" --policy gpu-test --probes "$2" >>"$OUT/coverage-compile.log" 2>&1 &&
		"$GX" probes compile --out "$CV/tenants/$1/probes" "$2" >>"$OUT/coverage-compile.log" 2>&1
}
crun() { # ID cmd...
	local id=$1; shift
	env LD_PRELOAD="$LIB" GPUEXT_TENANT_ID="$id" GPUEXT_TENANT_DIR="$CV/tenants/$id" \
		GPUEXT_TENANT_CONFIG="$CV/tenants/$id/config.json" GPUEXT_TENANT_ACCT="$CV/acct/$id" "$@"
}
# cread ID: "device host none graphLaunches latCount latSkipped p50ns p99ns" of tenant ID's launch table
cread() {
	"$GX" probes read --json "$CV/acct/$1/probes" >"$OUT/coverage-$1.json" 2>&1
	python3 - "$OUT/coverage-$1.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))["tenant"].get("launches") or {}
l = t.get("launches", {})
print(l.get("device", 0), l.get("host", 0), l.get("none", 0), t.get("graphLaunches", 0),
      sum(k.get("latencyCount", 0) for k in t.get("kernels", [])), t.get("latencySkipped", 0))
EOF
}
cinfo() { # ID: the classes and reasons, the top kernels
	"$GX" probes read "$CV/acct/$1/probes" 2>&1 | grep -E '^launches' | sed "s/^/INFO coverage tenant=$1 /"
	python3 - "$OUT/coverage-$1.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))["tenant"].get("launches") or {}
for k in t.get("kernels", [])[:5]:
    print(f"INFO coverage kernel {k['name'][:60]}{'...(%d bytes)' % k['nameLen'] if k.get('truncated') else ''} "
          f"measured={k['measured']} reason={k['reason']} launches={k['launches']} graph={k.get('graphLaunches', 0)} "
          f"grid={'x'.join(map(str, k['gridLast']))} block={'x'.join(map(str, k['blockLast']))}")
EOF
}

if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	bad probes-coverage "needs python3 with torch and a GPU"
elif ! ctenant 60 launch-count; then
	bad probes-coverage "gpuextctl probes compile failed (coverage-compile.log)"
else
	for id in 61 62 63 64 65; do # the same bundle for each run: one acct dir per run
		mkdir -p "$CV/tenants/$id" "$CV/acct/$id" && chmod 1777 "$CV/acct/$id" && rm -rf "$CV/acct/$id/probes" "$CV/tenants/$id"/*
		cp -r "$CV/tenants/60/." "$CV/tenants/$id/"
	done
	prof=$("${PY[@]}" prof 2>"$OUT/coverage-prof.err" | grep '^coverage_prof')
	info "coverage profiler: $prof"
	kprof=$(sed -n 's/.*eager=\([0-9]*\).*/\1/p' <<<"$prof"); gprof=$(sed -n 's/.*graph=\([0-9]*\).*/\1/p' <<<"$prof")
	want=$("${PY[@]}" eager 10 2>/dev/null | grep '^coverage_eager')
	got0=$(crun 60 "${PY[@]}" eager 0 2>"$OUT/coverage-60.err" | grep '^coverage_eager')
	got5=$(crun 61 "${PY[@]}" eager 5 2>"$OUT/coverage-61.err" | grep '^coverage_eager')
	got10=$(crun 62 "${PY[@]}" eager 10 2>"$OUT/coverage-62.err" | grep '^coverage_eager')
	if [[ -n $want && $got10 == "$want" ]]; then ok probes-coverage-unchanged
	else bad probes-coverage-unchanged "without '$want', with '$got10' (coverage-62.err)"; fi
	read -r d0 h0 n0 _ < <(cread 60); read -r d5 h5 n5 _ < <(cread 61); read -r d10 h10 n10 _ < <(cread 62)
	l0=$((d0 + h0)) l5=$((d5 + h5)) l10=$((d10 + h10))
	info "coverage eager launches: 0 forwards $l0, 5 forwards $l5, 10 forwards $l10 (device+host), unobserved $n0/$n5/$n10; profiler per forward ${kprof:-n/a}"
	cinfo 62
	if [[ -n $kprof ]] && (( kprof > 0 )); then perfwd=$kprof; else perfwd=$(((l5 - l0) / 5)); fi
	if (( l10 - l0 == 10 * perfwd && l5 - l0 == 5 * perfwd && perfwd > 0 && n0 + n5 + n10 == 0 )); then
		ok probes-coverage-eager
	else
		bad probes-coverage-eager "10 forwards added $((l10 - l0)), 5 added $((l5 - l0)), want 10 and 5 x $perfwd; unobserved $n0/$n5/$n10"
	fi
	gwant=$("${PY[@]}" graph 20 2>/dev/null | grep '^coverage_graph')
	crun 63 "${PY[@]}" graph 0 >/dev/null 2>"$OUT/coverage-63.err"
	gott=$(crun 64 "${PY[@]}" graph 20 2>"$OUT/coverage-64.err" | grep '^coverage_graph')
	read -r gd0 gh0 gn0 gg0 _ < <(cread 63); read -r gd20 gh20 gn20 gg20 _ < <(cread 64)
	nodes=$(( (gd20 + gh20 - gd0 - gh0) / 20 ))
	info "coverage graph: 0 replays $((gd0 + gh0)), 20 replays $((gd20 + gh20)) launches ($nodes a replay), graph launches $gg0/$gg20, unobserved $gn0/$gn20; profiler per replay ${gprof:-n/a}"
	cinfo 64
	if [[ $gott != "$gwant" || -z $gwant ]]; then
		bad probes-coverage-graph "output without '$gwant', with '$gott' (coverage-64.err)"
	elif (( gd20 + gh20 - gd0 - gh0 == 20 * nodes && nodes > 0 && gg20 - gg0 == 20 && gn0 + gn20 == 0 )) &&
		{ [[ -z $gprof ]] || (( gprof == 0 || nodes == gprof )); }; then
		ok probes-coverage-graph
	else
		bad probes-coverage-graph "20 replays added $((gd20 + gh20 - gd0 - gh0)) launches ($nodes a replay, profiler ${gprof:-n/a}), $((gg20 - gg0)) graph launches, unobserved $gn0/$gn20"
	fi
	# every class is device or host, and the observed share is 100%
	if python3 - "$OUT"/coverage-6[0-4].json <<'EOF'
import json, sys
for p in sys.argv[1:]:
    t = json.load(open(p))["tenant"].get("launches") or {}
    cov = t.get("coverage", [])
    if not cov or any(c["measured"] not in ("device", "host") for c in cov if c["launches"]):
        sys.exit(f"{p}: {cov}")
EOF
	then ok probes-coverage-labelled; else bad probes-coverage-labelled "a launch neither device nor host (coverage-6*.json)"; fi
	# launch-latency too: host-measured latency from events
	if ctenant 65 launch-count,launch-latency; then
		crun 65 "${PY[@]}" eager 10 >/dev/null 2>"$OUT/coverage-65.err"
		read -r _ lh _ _ lc ls < <(cread 65)
		"$GX" probes read "$CV/acct/65/probes" 2>&1 | grep -E '^(launches|latency)' | sed 's/^/INFO coverage latency /'
		python3 - "$OUT/coverage-65.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))["tenant"].get("launches") or {}
print(f"INFO coverage latency calibration_round_trip_ns={t.get('latencyCalibrationNs')} skipped={t.get('latencySkipped')}")
EOF
		if (( lc > 0 && lc + ls <= lh )); then ok probes-coverage-latency
		else bad probes-coverage-latency "$lc timed, $ls skipped of $lh host launches (coverage-65.err)"; fi
	else
		bad probes-coverage-latency "gpuextctl probes compile failed (coverage-compile.log)"
	fi
fi
