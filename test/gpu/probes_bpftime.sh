# probes_bpftime.sh - the bpftime group of the device-probe checks
# (GPUEXT_PROBE_CHECKS=bpftime), sourced by probes.sh (its ptenant, prun,
# pfield, ok/bad/info, $W, $OUT, $REPO, $GX, $PT).
#
# Checks (PASS/FAIL):
#   probes-bpftime-unchanged     the vector add's output with the four programs spliced in
#   probes-bpftime-thread-hist   a per-thread array counted with a plain += by every thread:
#                                every thread's row = the launches, no thread without a row
#   probes-bpftime-ret-snoop     one GPU ring record per thread and launch: kept + dropped
#                                = threads x launches
#   probes-bpftime-launch-bins   every thread of every launch in one latency bin
#   probes-bpftime-call-counter  every thread counted once a launch, one start time per
#                                block: all 64 block keys in the hash of exactly 64 entries
#                                that every thread updates (the storm helpers.cu once lost
#                                44 of), the pid from bpf_get_current_pid_tgid = the process's
#   probes-bpftime-launch-gap    launchlate's shape with hostWrites: every thread of every
#                                launch finds the launch time the interposer wrote into its
#                                map (none without) and lands in one bin; its start on the
#                                host's CLOCK_MONOTONIC (%globaltimer - the clock offset the
#                                interposer wrote at bind) falls inside the run
#   probes-bpftime-obj-NAME      (only when out/bpftime holds objects built by hand from
#                                bpftime's unmodified sources; gpu-prep describes them into
#                                out/gpu/bpftime-objs) the object loads from a probe directory,
#                                bt_vectoradd's image is patched, every map copied out, some
#                                view with a nonzero count
#   probes-bpftime-obj-NAME-retargeted  an object whose sections name another app's
#                                kernel (faiss, llama.cpp, PyTorch, ...): the same, its
#                                descriptor retargeting it to bt_vectoradd's kernel
# The programs (gpubpf/compile/testdata/bpftime, our own, in bpftime's
# style) are built by gpu-prep with the SDK's include/bpftime, their sections
# naming vecadd's _Z4vaddPKfS0_Pfi, into out/gpu/bpftime-dir.
BT_BLOCKS=64 BT_LAUNCHES=10
BT_THREADS=$((BT_BLOCKS * 256))
if [[ ! -f $REPO/out/gpu/bpftime-dir/thread-hist.bpf.o ]]; then
	bad probes-bpftime "needs out/gpu/bpftime-dir (make gpu-prep here, carry out/gpu)"
elif [[ -x $W/vecadd_nc ]]; then
	printf '{"probeDir": "%s"}\n' "$REPO/out/gpu/bpftime-dir" >"$W/bpftime-config.json"
	export GPUEXT_CONFIG=$W/bpftime-config.json
	if ptenant 51 thread-hist,ret-snoop,launch-bins,call-counter,launch-gap; then
		n=$((BT_THREADS))
		want=$("$W/vecadd_nc" $n $BT_LAUNCHES | head -1)
		mono0=$(python3 -c 'import time; print(time.monotonic_ns())')
		got=$(prun 51 "$W/vecadd_nc" $n $BT_LAUNCHES 2>"$OUT/probes-bpftime.err" | head -1)
		mono1=$(python3 -c 'import time; print(time.monotonic_ns())')
		punchanged bpftime "$want" "$got"
		"$GX" probes --state-dir "$PT" >"$OUT/probes-bpftime.txt" 2>&1
		"$GX" probes --state-dir "$PT" --json >"$OUT/probes-bpftime.json" 2>&1
		cat "$PT/acct/51/probes/"*.status >>"$OUT/probes-bpftime.txt" 2>/dev/null
		pid=$(basename "$(ls "$PT/acct/51/probes/"*.status | head -1)" .status)
		python3 - "$OUT/probes-bpftime.json" $BT_THREADS $BT_LAUNCHES $BT_BLOCKS "$pid" "$mono0" "$mono1" >"$OUT/probes-bpftime.checks" <<'PY'
import json, sys
path, threads, launches, blocks, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
mono0, mono1 = int(sys.argv[6]), int(sys.argv[7])
r = [x for x in json.load(open(path)) if x["tenant"] == 51][0]
d = {p["name"]: p for p in r.get("details", [])}
def out(name, good, why):
    print(("PASS " if good else "FAIL ") + name + ("" if good else " " + why))
e = (d.get("thread-hist", {}).get("perThread", {}).get("th_count", {}).get("entries") or [{}])[0]
pt = d.get("thread-hist", {}).get("perThread", {}).get("th_count", {})
out("probes-bpftime-thread-hist", e.get("rowsUsed") == threads and e.get("min") == launches and e.get("max") == launches and pt.get("noRow") == 0,
    "rows used %s (want %d), min %s max %s (want %d), accesses past the rows %s" % (e.get("rowsUsed"), threads, e.get("min"), e.get("max"), launches, pt.get("noRow")))
rb = d.get("ret-snoop", {}).get("records", {}).get("rs_events", {})
kept, dropped = rb.get("count", 0), rb.get("dropped", 0)
out("probes-bpftime-ret-snoop", kept > 0 and kept + dropped == threads * launches,
    "kept %d + dropped %d, want %d" % (kept, dropped, threads * launches))
bins = d.get("launch-bins", {}).get("counters", {})
out("probes-bpftime-launch-bins", sum(bins.values()) == threads * launches, "bins %s sum to %d, want %d" % (bins, sum(bins.values()), threads * launches))
cc = d.get("call-counter", {})
h = cc.get("hashes", {}).get("cc_start", {})
c, keys = cc.get("counters", {}), h.get("keys")
# every block's key 0..blocks-1 once (the hash has exactly `blocks` entries: all must land)
topok = all(0 <= e.get("key", {}).get("block", -1) < blocks for e in h.get("top", [])) and len(h.get("top", [])) == min(8, blocks)
out("probes-bpftime-call-counter", c.get("threads") == threads * launches and keys == blocks and topok and not h.get("badSize")
    and h.get("omitted", 0) == blocks - len(h.get("top", [])) and str(c.get("pid")) == pid,
    "threads %s (want %d), block start keys %s of %d (top %s, omitted %s, bad size %s), pid %s (want %s)" % (c.get("threads"), threads * launches,
    keys, blocks, [e.get("key", {}).get("block") for e in h.get("top", [])], h.get("omitted"), h.get("badSize"), c.get("pid"), pid))
lg = d.get("launch-gap", {}).get("counters", {})
lgbins = sum(lg.get(f, 0) for f in ("lt100ns", "lt1us", "lt10us", "lt100us", "lt1ms", "lt10ms", "lt100ms", "lt1s", "lt10s", "ge10s"))
start = lg.get("startMonoNs", 0)
out("probes-bpftime-launch-gap", lgbins == threads * launches and lg.get("noLaunchTime") == 0 and lg.get("launchNs", 0) > 0
    and mono0 - 1000000 <= start <= mono1 + 1000000,
    "bins sum to %d (want %d), %s threads without a launch time (want 0), launch time %s, a start at %s on CLOCK_MONOTONIC (run %d..%d), clock offset %s"
    % (lgbins, threads * launches, lg.get("noLaunchTime"), lg.get("launchNs"), start, mono0, mono1, lg.get("clockOffsetNs")))
print("INFO probe_bpftime_launch_gap %s" % json.dumps(lg, sort_keys=True))
print("INFO probe_bpftime bins=%s threadNs=%s records=%d dropped=%d" % (json.dumps(bins, sort_keys=True), c.get("threadNs"), kept, dropped))
PY
		while read -r verdict name why; do
			case $verdict in PASS) ok "$name" ;; FAIL) bad "$name" "$why (probes-bpftime.txt)" ;; INFO) info "$name $why" ;; esac
		done <"$OUT/probes-bpftime.checks"
	fi
	unset GPUEXT_CONFIG
fi

# bpftime's own objects (out/bpftime, built by hand, never committed), each
# from its own probe directory on bt_vectoradd: a generic check
# The objects docs/device-probes.md lists with a refused program, each for a
# real hazard: that program refused for that reason (the whole object when
# none of its programs passes) is a PASS (-refused), no such refusal a FAIL.
refusal() { # object dir name -> the refusal's words (a regex), or nothing
	case $1 in
	*-atomizer--*) echo 'bpf_cuda_exit' ;;
	*-directly-run-on-gpu--*) echo 'unbounded loop|not proven bounded|too complex' ;;
	*-gpu-shared-map--*|*-host-map-test--*) echo 'read-modify-write race' ;;
	esac
}
refused() { # name message: PASS when the object is one the docs list and the message gives its hazard
	local want; want=$(refusal "$1")
	if [[ -n $want ]] && grep -Eq "$want" <<<"$2"; then ok "probes-bpftime-obj-$1-refused"; info "probes-bpftime-obj-$1 refused as docs/device-probes.md lists: $(grep -Eo ".{0,80}($want).{0,60}" <<<"$2" | head -1)"; return 0; fi
	return 1
}
if [[ -d $REPO/out/gpu/bpftime-objs ]] && "${NVCCP[@]}" --compress-mode=none -o "$W/bt_vectoradd" "$REPO/test/gpu/bt_vectoradd.cu" >>"$OUT/build-probes.log" 2>&1; then
	id=60
	for od in "$REPO/out/gpu/bpftime-objs"/*/; do
		name=$(basename "$od") id=$((id + 1))
		if [[ -f $od/describe.err ]]; then
			refused "$name" "$(cat "$od/describe.err")" || bad "probes-bpftime-obj-$name" "no descriptor: $(head -c 300 "$od/describe.err")"
			continue
		fi
		# an object whose sections name another app's kernel runs a second
		# time, its descriptor retargeting it to bt_vectoradd's kernel
		# (btpass: gpu-test.sh's ok() counts in $pass)
		tag='' verdict=''
		for btpass in own retarget; do
			if [[ $btpass == retarget ]]; then
				[[ $verdict == OTHER* ]] || break
				tag=-retargeted id=$((id + 100))
				rm -rf "$W/bt-rt/$name" && mkdir -p "$W/bt-rt/$name" && cp "$od/$name.bpf.o" "$W/bt-rt/$name/"
				python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d.update(retarget=True, kernels=["_Z9vectorAddPKfS0_Pf"]); json.dump(d, open(sys.argv[2], "w"))' "$od/$name.json" "$W/bt-rt/$name/$name.json"
				od=$W/bt-rt/$name/
			fi
			printf '{"probeDir": "%s"}\n' "$od" >"$W/bt-obj-config.json"
			export GPUEXT_CONFIG=$W/bt-obj-config.json
			mkdir -p "$PT/tenants/$id" "$PT/acct/$id" && chmod 1777 "$PT/acct/$id" && rm -rf "$PT/acct/$id/probes"
			"$GX" settings write --dir "$PT/tenants/$id" --tenant "$id" --policy gpu-test --probes "$name" >/dev/null
			if ! "$GX" probes compile --out "$PT/tenants/$id/probes" "$name" >"$OUT/probes-bt-$name.compile" 2>&1; then
				msg=$(tr '\n' ' ' <"$OUT/probes-bt-$name.compile") msg=${msg//$REPO\//} # paths relative to the repo
				refused "$name" "$msg" || bad "probes-bpftime-obj-$name" "does not load: ${msg:$(( ${#msg} > 400 ? ${#msg} - 400 : 0 ))}"
				unset GPUEXT_CONFIG; continue
			fi
			# programs are verified one by one: an object the docs list loads
			# with its other programs, and probes compile names the refused one
			if [[ -n $(refusal "$name") ]]; then
				refused "$name" "$(grep -F ': refused ' "$OUT/probes-bt-$name.compile")" ||
					bad "probes-bpftime-obj-$name" "loads without the refusal docs/device-probes.md lists: $(head -c 300 "$OUT/probes-bt-$name.compile")"
			fi
			prun $id "$W/bt_vectoradd" 64 10 >"$OUT/probes-bt-$name.out" 2>&1
			"$GX" probes --state-dir "$PT" --json >"$OUT/probes-bt-$name.json" 2>&1
			verdict=$(python3 - "$OUT/probes-bt-$name.json" $id "$name" <<-'PY'
	import json, sys
	r = [x for x in json.load(open(sys.argv[1])) if x["tenant"] == int(sys.argv[2])]
	r = r[0] if r else {}
	s = [p for p in r.get("details", []) if p["name"] == sys.argv[3]]
	s = s[0] if s else {}
	nonzero = any(v for v in s.get("counters", {}).values()) or any(h.get("keys") for h in s.get("hashes", {}).values()) \
	    or any(x.get("count") or x.get("dropped") for x in s.get("records", {}).values()) \
	    or any(e.get("rowsUsed") for p in s.get("perThread", {}).values() for e in p.get("entries", []))
	why = []
	if not r.get("patched"): why.append("no image patched (unpatched: %s)" % r.get("unpatchedReasons"))
	if s.get("missing"): why.append("maps not copied out: %s" % s["missing"])
	if not nonzero: why.append("every view counted 0")
	reasons = r.get("unpatchedReasons") or {}
	if not r.get("patched") and set(reasons) == {"no-probed-kernel"}:
	    print("OTHER its sections name a kernel bt_vectoradd does not have: verified and compiled, not run")
	else:
	    print("PASS" if not why else "FAIL " + "; ".join(why))
	PY
	)
			case $verdict in
			PASS) ok "probes-bpftime-obj-$name$tag" ;;
			OTHER*) if [[ -n $tag ]]; then bad "probes-bpftime-obj-$name$tag" "patched nothing, retargeted"; else info "probes-bpftime-obj-$name ${verdict#OTHER }, so run again retargeted to it"; fi ;;
			*) bad "probes-bpftime-obj-$name$tag" "${verdict#FAIL } (probes-bt-$name.json)" ;;
			esac
			unset GPUEXT_CONFIG
		done
		[[ -z $tag ]] || id=$((id - 100))
	done
fi
