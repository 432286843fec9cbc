# probe_app.sh - section probe-app of make gpu-test, sourced by gpu-test.sh
# (uses its ok/bad/info, $W, $OUT, $REPO, $LIB): what device probes cost an
# operator's own workload, the way gpu_ext reports its tools (prefill
# throughput with and without each).
#
# GPUEXT_APP_CMD is the workload: a command whose last line of output is one
# throughput figure, higher is better (llama-bench's prefill tokens/s, say;
# nothing here builds an operator's workload). Unset, it is our own
# bt_vectoradd.cu with "rate": 2000 launches of 1875 blocks x 256 threads
# (480,000 threads, what llama.cpp's rms_norm launches at a 1024-token
# prefill), launches per second. It runs without the interposer (none),
# with it and no probes (interposer), and with each probe set of
# GPUEXT_APP_PROBES, interleaved over GPUEXT_APP_ROUNDS rounds (default 3).
# The default sets are launch-count and, when out/gpu/bpftime-objs holds
# bpftime's threadhist, kernelretsnoop and launchlate (built by hand from
# bpftime's unmodified sources, make gpu-prep), those three objects
# unchanged, retargeted by their descriptor to every kernel of the workload
# or to the kernels of GPUEXT_APP_KERNELS (comma-separated .entry names).
#
# With GPUEXT_APP_PTX it also times the probed kernel itself, which a
# whole-workload rate cannot resolve (llama.cpp's prefill rate moves by a
# third between processes on the H200): GPUEXT_APP_PTX is a PTX file holding
# the one kernel of GPUEXT_APP_KERNELS, or the app's library, whose PTX
# images cuobjdump -xptx extracts (the one with that .entry is used);
# GPUEXT_APP_LAUNCH="GRID BLOCK ARGS" is its launch in test/gpu/kernel_cost.c's
# terms. The plain PTX and each set's splice of it (ptxpatch_cli with the
# set's module) are timed side by side in one process, GPUEXT_APP_KROUNDS
# rounds (default 12) of graphs of GPUEXT_APP_KLAUNCHES launches (1000):
#   INFO kernel_cost file=SET.ptx kernel=K median_us=M ... ratio=R added_us=D
#   INFO kernel_cost stream=launch|write writes=W ... host_us=H added_us=D
#        (the plain kernel launched on a stream after 0, 1 or 2 launch-time
#        writes, what a set with launch times adds to each probed launch)
#   FAIL probe-app-kernel[-SET]    the kernel could not be timed or spliced
#
# Lines:
#   INFO probe-app round=R set=S value=V
#   INFO probe-app set=S median=V slowdown=X (median of none / median of S)
#        round_slowdowns=MIN-MAX (each round's none / that round's S: the spread)
#        launches=N device=N host=N patched=N (the set's tenant, gpuextctl probes)
#   PASS/FAIL probe-app-S-observed   the set's probes ran: an image patched and a
#                                    view counted something
#   PASS/FAIL probe-app-S-overhead   slowdown under gpu_ext's published figure
#                                    for the tool (threadhist 3%, kernelretsnoop
#                                    8%, launchlate 14%); other sets: INFO only
# shellcheck shell=bash
GX=${GPUEXT_GPUEXTCTL:-$REPO/bin/gpuextctl}
AP=$W/probe-app
# a probe directory per bpftime tool (their programs share names), the
# object retargeted to every kernel by its descriptor
app_tool() { # tool glob-suffix: copies out/gpu/bpftime-objs/*SUFFIX as TOOL
	local od='' d
	for d in "$REPO"/out/gpu/bpftime-objs/*"$2"; do od=$d; break; done
	[[ -n $od && -f $od/$(basename "$od").json ]] || return 1
	mkdir -p "$AP/dirs/$1"
	cp "$od/$(basename "$od").bpf.o" "$AP/dirs/$1/$1.bpf.o"
	printf '{"probeDir": "%s"}\n' "$AP/dirs/$1" >"$AP/dirs/$1.config.json"
	python3 - "$od/$(basename "$od").json" "$AP/dirs/$1/$1.json" "$1" "${GPUEXT_APP_KERNELS:-}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d.update(name=sys.argv[3], object=sys.argv[3] + ".bpf.o", retarget=True)
d["description"] = "bpftime's %s, unchanged, in %s" % (sys.argv[3], sys.argv[4] or "every kernel")
d.pop("kernels", None)
if sys.argv[4]:
    d["kernels"] = sys.argv[4].split(",")
json.dump(d, open(sys.argv[2], "w"), indent=1)
PY
}
sets=${GPUEXT_APP_PROBES:-}
if [[ -z $sets ]]; then
	sets=launch-count
	app_tool threadhist -threadhist--threadhist && sets+=" threadhist"
	app_tool kernelretsnoop -kernelretsnoop--kernelrets && sets+=" kernelretsnoop"
	app_tool launchlate -launchlate--launchlate && sets+=" launchlate"
fi
app_config() { [[ -f $AP/dirs/$1.config.json ]] && echo "$AP/dirs/$1.config.json"; }
app_target() { case $1 in threadhist) echo 0.03 ;; kernelretsnoop) echo 0.08 ;; launchlate) echo 0.14 ;; esac; }

if [[ -z ${GPUEXT_APP_CMD:-} ]]; then
	if nvcc -O2 -arch=sm_90 --compress-mode=none -o "$AP/bt_vectoradd" "$REPO/test/gpu/bt_vectoradd.cu" >"$OUT/probe-app-build.log" 2>&1; then
		GPUEXT_APP_CMD="$AP/bt_vectoradd ${GPUEXT_APP_BLOCKS:-1875} ${GPUEXT_APP_LAUNCHES:-2000} rate"
	else
		bad probe-app "nvcc failed (probe-app-build.log)"
	fi
fi
if [[ -z ${GPUEXT_APP_CMD:-} ]]; then
	:
elif [[ ! -x $GX ]]; then
	bad probe-app "needs bin/gpuextctl (make gpu-prep here, carry bin)"
else
	# tenant per set: 1 = interposer, no probes; 2.. = the sets
	i=1
	for s in interposer $sets; do
		mkdir -p "$AP/tenants/$i" "$AP/acct/$i" && chmod 1777 "$AP/acct/$i"
		if [[ $s == interposer ]]; then
			"$GX" settings write --dir "$AP/tenants/$i" --tenant $i --policy gpu-test >/dev/null
		else
			GPUEXT_CONFIG=$(app_config "$s") "$GX" settings write --dir "$AP/tenants/$i" --tenant $i --policy gpu-test --probes "$s" >/dev/null &&
				GPUEXT_CONFIG=$(app_config "$s") "$GX" probes compile --out "$AP/tenants/$i/probes" "$s" >"$OUT/probe-app-$s.compile" 2>&1 ||
				bad "probe-app-$s-observed" "does not compile: $(tail -c 400 "$OUT/probe-app-$s.compile")"
		fi
		i=$((i + 1))
	done
	app_run() { # tenant-id|none: prints the command's last line
		if [[ $1 == none ]]; then
			bash -c "$GPUEXT_APP_CMD" 2>>"$OUT/probe-app.err" | tail -1
		else
			rm -rf "$AP/acct/$1/probes"
			env LD_PRELOAD="$LIB" GPUEXT_TENANT_ID="$1" GPUEXT_TENANT_DIR="$AP/tenants/$1" \
				GPUEXT_TENANT_CONFIG="$AP/tenants/$1/config.json" GPUEXT_TENANT_ACCT="$AP/acct/$1" \
				bash -c "$GPUEXT_APP_CMD" 2>>"$OUT/probe-app.err" | tail -1
		fi
	}
	declare -A vals
	for r in $(seq 1 "${GPUEXT_APP_ROUNDS:-3}"); do
		i=0
		for s in none interposer $sets; do
			id=$([[ $s == none ]] && echo none || echo $i)
			v=$(app_run "$id")
			info "probe-app round=$r set=$s value=$v"
			vals[$s]+="${v:-x} "
			i=$((i + 1))
		done
	done
	i=1
	for s in interposer $sets; do
		GPUEXT_CONFIG=$(app_config "$s") "$GX" probes --state-dir "$AP" --json >"$OUT/probe-app-$s.json" 2>&1
		read -r line verdict < <(python3 - "$OUT/probe-app-$s.json" $i "$s" "${vals[none]}" "${vals[$s]}" "$(app_target "$s")" <<'PY'
import json, statistics, sys
path, tid, name, base, got, target = sys.argv[1:7]
def med(s):
    v = [float(x) for x in s.split() if x.replace(".", "", 1).isdigit()]
    return statistics.median(v) if v else 0.0
b, g = med(base), med(got)
slow = b / g if g else float("inf")
# the spread: each round's set against the same round's run without the interposer
num = lambda x: float(x) if x.replace(".", "", 1).isdigit() else 0.0
pairs = [(num(x), num(y)) for x, y in zip(base.split(), got.split()) if num(x) > 0 and num(y) > 0]
rr = sorted(x / y for x, y in pairs)
spread = "%.4f-%.4f" % (rr[0], rr[-1]) if rr else "-"
rows = [x for x in json.load(open(path)) if x["tenant"] == int(tid)]
r = rows[0] if rows else {}
cov = r.get("coverage") or {}
det = [p for p in r.get("details", []) if p["name"] == name]
det = det[0] if det else {}
counted = any(v for v in det.get("counters", {}).values()) or any(h.get("keys") for h in det.get("hashes", {}).values()) \
    or any(x.get("count") or x.get("dropped") for x in det.get("records", {}).values()) \
    or any(e.get("rowsUsed") for p in det.get("perThread", {}).values() for e in p.get("entries", [])) \
    or bool(r.get("launches"))
line = "set=%s median=%.2f slowdown=%.4f round_slowdowns=%s none_median=%.2f launches=%s device=%s host=%s patched=%s unpatched=%s" % (
    name, g, slow, spread, b, r.get("launches", "-"), cov.get("device", "-"), cov.get("host", "-"), r.get("patched", 0), r.get("unpatchedReasons", {}))
v = []
if name != "interposer":
    v.append("observed=%s" % ("ok" if r.get("patched") and counted else "no"))
if target and g and r.get("patched") and counted:
    v.append("overhead=%s" % ("ok" if slow - 1 <= float(target) else "over"))
print(line.replace(" ", "|"), ",".join(v) or "-")
PY
)
		info "probe-app ${line//|/ }"
		case $verdict in *observed=ok*) ok "probe-app-$s-observed" ;; *observed=no*) bad "probe-app-$s-observed" "no image patched or every view 0 (probe-app-$s.json)" ;; esac
		t=$(app_target "$s")
		case $verdict in *overhead=ok*) ok "probe-app-$s-overhead" ;; *overhead=over*) bad "probe-app-$s-overhead" "slowdown over gpu_ext's $t: ${line//|/ }" ;; esac
		i=$((i + 1))
	done
fi

# The probed kernel's own GPU time, plain and spliced (GPUEXT_APP_PTX).
if [[ -n ${GPUEXT_APP_PTX:-} && -x $GX ]]; then
	read -r kgrid kblock kargs <<<"${GPUEXT_APP_LAUNCH:-}"
	kptx=$GPUEXT_APP_PTX
	if [[ -z ${GPUEXT_APP_KERNELS:-} || $GPUEXT_APP_KERNELS == *,* || -z $kargs ]]; then
		bad probe-app-kernel "needs one kernel in GPUEXT_APP_KERNELS and GPUEXT_APP_LAUNCH=\"GRID BLOCK ARGS\""
		kptx=
	elif [[ $kptx != *.ptx ]]; then # a library: its PTX images, the one that defines the kernel
		mkdir -p "$AP/ptx" && (cd "$AP/ptx" && cuobjdump -xptx all "$GPUEXT_APP_PTX" >/dev/null 2>>"$OUT/probe-app-build.log")
		kptx=$(grep -l -F -e ".entry $GPUEXT_APP_KERNELS(" "$AP"/ptx/*.ptx 2>/dev/null | head -1)
		[[ -n $kptx ]] || bad probe-app-kernel "no PTX image of $GPUEXT_APP_PTX defines $GPUEXT_APP_KERNELS (cuobjdump -xptx)"
	fi
	if [[ -z $kptx ]]; then
		:
	elif ! gcc -O2 -std=gnu11 -I "$REPO/devrt/lib" -o "$AP/kernel_cost" "$REPO/test/gpu/kernel_cost.c" -ldl >>"$OUT/probe-app-build.log" 2>&1; then
		bad probe-app-kernel "gcc failed (probe-app-build.log)"
	else
		cp "$kptx" "$AP/plain.ptx"
		files=("$AP/plain.ptx")
		i=2 # the sets' tenants, as above
		for s in $sets; do
			d=$AP/tenants/$i/probes
			if [[ -f $d/module.conf ]] && "$W/devrt/ptxpatch_cli" -c "$d/module.conf" "$d/module.ptx" "$AP/plain.ptx" >"$AP/$s.ptx" 2>>"$OUT/probe-app-build.log"; then
				files+=("$AP/$s.ptx")
			else
				bad "probe-app-kernel-$s" "the splice left $GPUEXT_APP_KERNELS unpatched: $(head -c 200 "$AP/$s.ptx") (probe-app-build.log)"
			fi
			i=$((i + 1))
		done
		"$AP/kernel_cost" "${GPUEXT_APP_KROUNDS:-12}" "${GPUEXT_APP_KLAUNCHES:-1000}" "$GPUEXT_APP_KERNELS" "$kgrid" "$kblock" "$kargs" \
			"${files[@]}" >"$OUT/probe-app-kernel.txt" 2>&1
		rc=$?
		grep -E '^INFO kernel_cost' "$OUT/probe-app-kernel.txt"
		[[ $rc == 0 ]] || bad probe-app-kernel "kernel_cost exited $rc: $(tail -c 300 "$OUT/probe-app-kernel.txt")"
	fi
fi
