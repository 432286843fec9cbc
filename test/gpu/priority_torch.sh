# priority_torch.sh - sourced by gpu-test.sh: the MPS control checks
# (section mps-control) and the priority test with real frameworks
# (section priority-torch). Uses gpu-test.sh's ok/bad/info, $W, $OUT,
# $REPO, $LIB and the apps it built.
# shellcheck shell=bash
MPS_CTL=${MPS_CTL:-$(command -v nvidia-cuda-mps-control || true)}
GPUEXTCTL="$REPO/bin/gpuextctl"
# shellcheck source=test/gpu/prio_figures.sh
source "$REPO/test/gpu/prio_figures.sh"

# An MPS control daemon of our own, in $1 (pipe/ and log/ below it).
tmps_start() {
	export CUDA_MPS_PIPE_DIRECTORY="$1/pipe" CUDA_MPS_LOG_DIRECTORY="$1/log"
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	"$MPS_CTL" -d
	sleep 0.5
}
tmps_stop() {
	echo quit | "$MPS_CTL" >/dev/null 2>&1
	sleep 1
	unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
tmps() { echo "$*" | "$MPS_CTL" 2>&1; } # one control command, its answer

# mps-control: what the host can change at run time, and what a tenant
# needs of the pipe directory. A tenant's view holds only the entries a
# CUDA client needs (hard links of the daemon's sockets and pipes: the
# shape a per-file bind mount gives a container); through it a client's
# CUDA still works as an MPS client (the server log names its pid) and
# nvidia-cuda-mps-control commands get no answer.
if want mps-control; then
	M="$W/mpsctl" R="$OUT/mps-control.txt"
	if [[ -z $MPS_CTL || ! -x "$W/apps_static" ]]; then
		bad mps-control "needs nvidia-cuda-mps-control and apps_static"
	else
		rm -rf "$M" && tmps_start "$M"
		{
			echo "== help"; tmps help
			echo "== pipe dir, daemon only"; ls -la "$M/pipe"
			"$W/apps_static" compute >/dev/null 2>&1
			echo "== pipe dir, after a client (server started)"; (cd "$M/pipe" && find . -mindepth 1 -printf '%y %m %u %p\n')
			echo "== get_server_list"; tmps get_server_list
			srv=$(tmps get_server_list | head -1)
			echo "== get_default_active_thread_percentage"; tmps get_default_active_thread_percentage
			echo "== get_active_thread_percentage $srv"; tmps get_active_thread_percentage "$srv"
			echo "== set_active_thread_percentage $srv 30"; tmps set_active_thread_percentage "$srv" 30
			echo "== get_active_thread_percentage $srv"; tmps get_active_thread_percentage "$srv"
			echo "== get_default_client_priority (may be unknown)"; tmps get_default_client_priority
			echo "== as uid 65534: get_server_list"; echo get_server_list | setpriv --reuid=65534 --regid=65534 --clear-groups "$MPS_CTL" 2>&1
			echo "== /proc/net/unix (pipe dir)"; grep "$M/pipe" /proc/net/unix
			echo "== logs"; tail -n 30 "$M/log/control.log" "$M/log/server.log" 2>&1
		} >"$R" 2>&1
		# one view per entry left out, and one per entry alone
		entries=$(cd "$M/pipe" && ls -A)
		client_ok() { # view -> 0 when a client through it is an MPS client of the server
			local p before
			before=$(grep -c . "$M/log/server.log" 2>/dev/null)
			CUDA_MPS_PIPE_DIRECTORY="$1" "$W/apps_static" compute >/dev/null 2>&1 &
			p=$!
			wait "$p" || return 1
			sleep 0.2
			tail -n +"$((before + 1))" "$M/log/server.log" | grep -qw "$p"
		}
		control_ok() { echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$1" timeout 5 "$MPS_CTL" 2>/dev/null | grep -q '[0-9]'; }
		view() { # dir entries... -> a view holding those entries of the pipe dir
			rm -rf "$1" && mkdir -p "$1"
			local d=$1 e; shift
			for e in "$@"; do
				if [[ -d "$M/pipe/$e" ]]; then cp -a --link "$M/pipe/$e" "$d/$e" 2>/dev/null || mkdir -p "$d/$e"; else ln "$M/pipe/$e" "$d/$e"; fi
			done
		}
		echo "== views (client: an MPS client through it; control: mps-control answers through it)" >>"$R"
		client_ok "$M/pipe" && full_client=yes || full_client=no
		control_ok "$M/pipe" && full_control=yes || full_control=no
		echo "full client=$full_client control=$full_control" >>"$R"
		split=""
		for e in $entries; do
			# shellcheck disable=SC2046
			view "$M/v" $(printf '%s\n' $entries | grep -vxF "$e")
			c=no k=no; client_ok "$M/v" && c=yes; control_ok "$M/v" && k=yes
			echo "without $e: client=$c control=$k" >>"$R"
			[[ $c == yes && $k == no ]] && split="$split $e"
		done
		for e in $entries; do
			view "$M/v" "$e"
			c=no k=no; client_ok "$M/v" && c=yes; control_ok "$M/v" && k=yes
			echo "only $e: client=$c control=$k" >>"$R"
		done
		# The tenant view admission mounts: the client socket alone. Through
		# it, commands that change the daemon must not take effect.
		view "$M/v" control
		tv_client=no; client_ok "$M/v" && tv_client=yes
		{
			echo "== through the tenant view (control only): set_default_active_thread_percentage 10"
			echo set_default_active_thread_percentage 10 | CUDA_MPS_PIPE_DIRECTORY="$M/v" timeout 5 "$MPS_CTL" 2>&1
			echo "== through the tenant view: set_default_client_priority 1"
			echo set_default_client_priority 1 | CUDA_MPS_PIPE_DIRECTORY="$M/v" timeout 5 "$MPS_CTL" 2>&1
			echo "== through the tenant view: get_server_list"
			echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$M/v" timeout 5 "$MPS_CTL" 2>&1
			echo "== as uid 65534 through the full dir: set_default_active_thread_percentage 11"
			echo set_default_active_thread_percentage 11 | setpriv --reuid=65534 --regid=65534 --clear-groups timeout 5 "$MPS_CTL" 2>&1
		} >>"$R"
		dflt=$(tmps get_default_active_thread_percentage); dprio=$(tmps get_default_client_priority)
		echo "== host view after: default active thread percentage $dflt, default client priority $dprio" >>"$R"
		echo quit | CUDA_MPS_PIPE_DIRECTORY="$M/v" timeout 5 "$MPS_CTL" >>"$R" 2>&1
		sleep 1
		alive=no; [[ -n $(tmps get_server_list) ]] && alive=yes
		echo "== quit through the tenant view: daemon still answers: $alive" >>"$R"
		tmps_stop
		cat "$R"
		if [[ $full_client == yes && $full_control == yes ]]; then ok mps-control-baseline; else bad mps-control-baseline "client=$full_client control=$full_control through the daemon's own pipe dir"; fi
		if [[ $tv_client == yes && $dflt == 100.0 && $dprio == 0 && $alive == yes ]]; then
			ok "mps-control-tenant-view (a client through the control socket alone; set_* and quit through it change nothing)"
		else
			bad mps-control-tenant-view "client=$tv_client default percentage=$dflt default priority=$dprio daemon alive after quit=$alive (see mps-control.txt)"
		fi
	fi
fi

# priority-torch: latency-critical PyTorch inference (a CUDA-graph request
# and an eager one, alternating every GPUEXT_TORCH_PERIOD_US) beside
# best-effort PyTorch training: cnn2 (two ResNet-50), gnn2 (two GCNs,
# torch-geometric), mix4 (two of each). Modes:
#   alone       the latency-critical process by itself (once per run)
#   nopolicy    no interposer, no MPS: the GPU time-slices the contexts
#   mps         an MPS server, no interposer (MPS alone)
#   gpuext-P    MPS + the interposer; best-effort tenants have smPercent P
#               and mpsClientPriority 1 (gpuext-P-p0: priority 0)
#   gate        the interposer's launch gate, no MPS
#   gpuext-ctl[-B][-dD]  MPS + the interposer + the latency controller (-B: its
#               starting budget B% instead of the default 60; -dD: its
#               latencyControl.paceDepth D, 0 no bound) (gpuextctl
#               board --standalone, as the agent runs it): the
#               latency-critical tenant has latencyTarget
#               GPUEXT_TORCH_TARGET (1.5x), each trainer is its own
#               best-effort tenant capped at smPercent GPUEXT_TORCH_CTL_CAP
#               (40) with mpsClientPriority 1; the controller chooses the
#               share their contexts get and paces their launches. The
#               latency-critical process first runs alone for
#               GPUEXT_TORCH_CALIB_S (4) so the controller learns its solo p99.
# Best-effort throughput is steps/s summed over the processes, counted
# inside the latency-critical window. Targets per scenario and policy mode,
# on every run: LC p99 <= 1.5x alone (graph and eager), >= 4x better than
# nopolicy, BE throughput >= 0.8 of nopolicy.
if want priority-torch; then
	PY=${GPUEXT_PYTHON:-python3}
	TP="$REPO/test/gpu/prio_torch.py"
	T_SECONDS=${GPUEXT_TORCH_SECONDS:-8}
	T_PERIOD_US=${GPUEXT_TORCH_PERIOD_US:-2000}
	T_RUNS=${GPUEXT_TORCH_RUNS:-3}
	T_SCEN=${GPUEXT_TORCH_SCENARIOS:-cnn2 gnn2 mix4}
	T_MODES=${GPUEXT_TORCH_MODES:-nopolicy gpuext-40}
	T_RES="$OUT/priority-torch.txt"
	: >"$T_RES"
	tprio_run() { # run scenario mode
		local run=$1 scen=$2 mode=$3 models=() pids=() i sm=0 lcsm=0 prio=1 board_pid="" D="$W/tprio"
		case $scen in
		cnn2) models=(resnet50 resnet50) ;;
		gnn2) models=(gcn gcn) ;;
		mix4) models=(resnet50 resnet50 gcn gcn) ;;
		mix2) models=(resnet50 gcn) ;;
		none) models=() ;;
		*) bad "priority-torch" "unknown scenario $scen"; return ;;
		esac
		local budget="" depth=""
		if [[ $mode == gpuext-ctl* ]]; then
			sm=${GPUEXT_TORCH_CTL_CAP:-40}
			[[ $mode =~ ^gpuext-ctl-([0-9]+) ]] && budget=${BASH_REMATCH[1]} # the controller's starting budget
			[[ $mode =~ -d([0-9]+)$ ]] && depth=${BASH_REMATCH[1]}           # its pacing depth
		elif [[ $mode == gpuext-auto ]]; then
			# the host's share per best-effort process: a budget for the GPU
			# split among the best-effort processes on it
			sm=$((${GPUEXT_TORCH_BE_BUDGET:-60} / ${#models[@]}))
		elif [[ $mode == gpuext-* ]]; then
			sm=${mode#gpuext-}; sm=${sm%%-*}
			[[ $mode == *-p0 ]] && prio=0
			# gpuext-P-lcL: the latency-critical process capped at L% too
			[[ $mode =~ -lc([0-9]+) ]] && lcsm=${BASH_REMATCH[1]}
		fi
		rm -rf "$D" && mkdir -p "$D/tenants/1" "$D/tenants/2" "$D/acct/1" "$D/acct/2" "$D/board"
		local target=()
		[[ $mode == gpuext-ctl* ]] && target=(--latency-target "${GPUEXT_TORCH_TARGET:-1.5x}")
		"$GPUEXTCTL" settings write --dir "$D/tenants/1" --tenant 1 --class latency-critical --active-window-us 6000 ${target[@]+"${target[@]}"}
		local gate=()
		[[ $mode == gate ]] && gate=(--launch-gate) # the gate is the policy's choice (launchGate)
		"$GPUEXTCTL" settings write --dir "$D/tenants/2" --tenant 2 --class best-effort --sm-percent "$sm" --mps-client-priority "$prio" ${gate[@]+"${gate[@]}"}
		if [[ $mode == gpuext-ctl* ]]; then # one best-effort tenant per trainer, as one container each
			for i in "${!models[@]}"; do
				mkdir -p "$D/tenants/$((2 + i))" "$D/acct/$((2 + i))"
				"$GPUEXTCTL" settings write --dir "$D/tenants/$((2 + i))" --tenant $((2 + i)) --class best-effort --sm-percent "$sm" --mps-client-priority "$prio"
			done
		fi
		[[ $mode == mps || $mode == gpuext-* ]] && tmps_start "$D/mps"
		if [[ $mode == gate || $mode == gpuext-ctl* ]]; then
			local lcc=""
			[[ -n $budget ]] && lcc="\"budgetPercent\":$budget"
			[[ -n $depth ]] && lcc="${lcc:+$lcc,}\"paceDepth\":$depth"
			printf '{"stateDir":"%s","latencyControl":{%s}}\n' "$D" "$lcc" >"$D/gpuext.json"
			local ctl=(--latency-control=false --interval 200us)
			[[ $mode == gpuext-ctl* ]] && ctl=(--latency-control)
			"$GPUEXTCTL" --config "$D/gpuext.json" board --standalone "${ctl[@]}" >"$D/ctl.txt" 2>&1 & # no agent runs here
			board_pid=$!
			sleep 0.5
		fi
		if [[ $mode == gpuext-ctl* ]]; then
			# the controller learns the latency-critical tenant's p99 alone
			env GPUEXT_DEVRT_DEBUG=0 LD_PRELOAD="$LIB" GPUEXT_TENANT_DIR="$D/tenants/1" GPUEXT_TENANT_ACCT="$D/acct/1" GPUEXT_BOARD="$D/board/board" \
				PYTHONUNBUFFERED=1 "$PY" "$TP" lc "${GPUEXT_TORCH_CALIB_S:-4}" "$T_PERIOD_US" >"$D/calib.txt" 2>&1
			sleep 1.2 # one more controller step
			cp "$D/latency.json" "$D/latency-calib.json" 2>/dev/null
		fi
		pre() { # tenant -> the env admission would inject (policy modes only)
			[[ $mode == gpuext-* || $mode == gate ]] || return 0
			echo "GPUEXT_DEVRT_DEBUG=1 LD_PRELOAD=$LIB GPUEXT_TENANT_DIR=$D/tenants/$1 GPUEXT_TENANT_ACCT=$D/acct/$1 GPUEXT_BOARD=$D/board/board"
			((lcsm > 0 && $1 == 1)) && echo "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$lcsm"
			return 0
		}
		for i in "${!models[@]}"; do
			local bt=2
			[[ $mode == gpuext-ctl* ]] && bt=$((2 + i))
			# shellcheck disable=SC2046
			env $(pre $bt) PYTHONUNBUFFERED=1 "$PY" "$TP" be "${models[$i]}" >"$D/be$i.txt" 2>&1 &
			pids+=($!)
			[[ $mode == gpuext-ctl* ]] && sleep 1 # contexts one after another, each seeing the board as it is
		done
		local waited=0
		while ((${#pids[@]} > 0)) && [[ $(cat "$D"/be*.txt 2>/dev/null | grep -c '^be_ready') -lt ${#pids[@]} ]] && ((waited < 240)); do
			sleep 0.5; waited=$((waited + 1))
		done
		# a trainer that never got ready, or is gone, counts 0 steps: say which, and why
		for i in "${!models[@]}"; do
			grep -q '^be_ready' "$D/be$i.txt" 2>/dev/null ||
				info "priority-torch run=$run scen=$scen mode=$mode be$i=${models[$i]} not ready after $((waited / 2)) s: $(grep -v 'primary context\|cuMemAlloc' "$D/be$i.txt" 2>/dev/null | tail -c 300 | tr '\n' ' ')"
		done
		# shellcheck disable=SC2046
		env $(pre 1) PYTHONUNBUFFERED=1 "$PY" "$TP" lc "$T_SECONDS" "$T_PERIOD_US" >"$D/lc.txt" 2>&1
		for i in "${!pids[@]}"; do
			# (an exited child not yet waited for is a zombie, Z in its stat)
			[[ $(awk '{print $3}' "/proc/${pids[$i]}/stat" 2>/dev/null) =~ ^[^Z]$ ]] ||
				info "priority-torch run=$run scen=$scen mode=$mode be$i=${models[$i]} exited during the run: $(grep -v 'primary context\|cuMemAlloc' "$D/be$i.txt" 2>/dev/null | tail -c 300 | tr '\n' ' ')"
		done
		for i in "${pids[@]}"; do kill -TERM "$i" 2>/dev/null; done
		for i in "${pids[@]}"; do wait "$i" 2>/dev/null; done
		local ctl_cpu=""
		if [[ $mode == gpuext-ctl* ]]; then
			cp "$D/latency.json" "$D/latency-end.json" 2>/dev/null
			# the publisher's and the controller's CPU over their life: user+system ticks, and seconds alive
			ctl_cpu=$(awk -v hz="$(getconf CLK_TCK)" -v up="$(cut -d' ' -f1 /proc/uptime)" '{printf "ctl_cpu_s=%.2f ctl_alive_s=%.0f", ($14 + $15) / hz, up - $22 / hz}' "/proc/$board_pid/stat" 2>/dev/null)
		fi
		[[ -n $board_pid ]] && kill "$board_pid" 2>/dev/null
		[[ $mode == mps || $mode == gpuext-* ]] && tmps_stop
		local figs line
		if ! figs=$(prio_figures "$D"); then
			bad "priority-torch-$scen-$mode" "run $run: no latency-critical result: $(tail -3 "$D/lc.txt" | tr '\n' ' ')"
			return
		fi
		line="run=$run scen=$scen mode=$mode $figs be_dtype=$GPUEXT_TORCH_BE_DTYPE"
		[[ $mode == gpuext-* ]] && line="$line be_confined=$(cat "$D"/be*.txt | grep -c "CUDA_MPS_CLIENT_PRIORITY=$prio, launch gate off")/${#pids[@]}"
		[[ $mode == gpuext-* ]] && line="$line sm=$sm prio=$prio lc_sm=$lcsm"
		if [[ $mode == gpuext-ctl* ]]; then
			# what the controller saw and chose: the shares the trainers got,
			# its solo and last p99 of the latency-critical tenant, its verdict
			line="$line ctl_shares=$(for f in "$D"/be*.txt; do grep -o 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=[0-9]*' "$f" | head -1 | cut -d= -f2; done | paste -sd,)"
			line="$line $(python3 -c 'import json,sys
s=json.load(open(sys.argv[1])); t=[x for x in s["tenants"] if x["tenant"]==1][0]
print("ctl_solo_p99_us=%d ctl_p99_us=%d ctl_target_us=%d ctl_ratio=%.2f ctl_quantile=%.2f ctl_verdict=%s ctl_budget=%.0f ctl_pace=%d ctl_depth=%d" % (t["soloP99Ns"]/1000, t["p99Ns"]/1000, t["targetP99Ns"]/1000, t["ratio"], t["worstQuantile"], t["verdict"] or "none", s["budget"], s["pace"], s.get("paceDepth", 0)))' "$D/latency-end.json" 2>/dev/null || echo ctl_status=none)"
			line="$line ctl_log=$(grep -c "latency target missed" "$D/ctl.txt")miss,$(grep -c "pacing off" "$D/ctl.txt")relax $ctl_cpu"
			# the latency-critical process alone as a gpuext node runs it
			# (under MPS and the interposer, no trainer): the calibration run
			line="$line $(for k in graph_p50 graph_p99 eager_p50 eager_p99; do printf 'calib_%s_us=%s ' "$k" "$(awk -v k="lc_${k}_us" '$1 == k {print $2}' "$D/calib.txt")"; done)"
			line=${line% }
		fi
		line="$line be_ticks=$(for f in "$D"/be*.txt; do grep -c '^be_tick' "$f"; done | paste -sd,)"
		echo "$line" >>"$T_RES"
		mkdir -p "$W/tplogs"
		for f in "$D"/*.txt; do grep -v 'dlsym\|primary context' "$f" | tail -n 40 >"$W/tplogs/$run-$scen-$mode-${f##*/}"; done
		for f in "$D"/latency-*.json; do [[ -e $f ]] && cp "$f" "$W/tplogs/$run-$scen-$mode-${f##*/}"; done
		info "priority-torch $line"
	}
	# The trainers' precision: fp32 unless GPUEXT_TORCH_BE_DTYPE=bf16. Under
	# an MPS thread-percentage limit, bf16 ResNet-50 training returns
	# non-finite outputs on the H200's driver (the share-finite check below),
	# and a trainer that stops on a NaN loss says nothing about throughput.
	export GPUEXT_TORCH_BE_DTYPE=${GPUEXT_TORCH_BE_DTYPE:-fp32}
	# share-finite: the same seeded training steps on the whole GPU and as
	# a best-effort tenant under gpuext's share (MPS + the interposer with
	# smPercent GPUEXT_FINITE_SM): every output finite and the last loss
	# within 5% of the whole GPU's, per precision.
	tprio_finite() { # dtype
		local dt=$1 D="$W/tfinite" ref got
		rm -rf "$D" && mkdir -p "$D/tenants/2" "$D/acct/2"
		"$GPUEXTCTL" settings write --dir "$D/tenants/2" --tenant 2 --class best-effort --sm-percent "${GPUEXT_FINITE_SM:-40}" --mps-client-priority 1
		ref=$("$PY" "$TP" finite "$dt" 8 2>&1 | grep '^finite')
		tmps_start "$D/mps"
		got=$(env LD_PRELOAD="$LIB" GPUEXT_TENANT_DIR="$D/tenants/2" GPUEXT_TENANT_ACCT="$D/acct/2" "$PY" "$TP" finite "$dt" 8 2>&1 | grep '^finite')
		tmps_stop
		info "priority-torch share-finite whole GPU: ${ref:-no result}"
		info "priority-torch share-finite smPercent ${GPUEXT_FINITE_SM:-40}: ${got:-no result}"
		if [[ -z $ref || -z $got ]]; then
			bad "priority-torch-share-finite-$dt" "no result (whole GPU: '${ref}', share: '${got}')"
		elif [[ $ref != *"nonfinite_steps=0/"* ]]; then
			bad "priority-torch-share-finite-$dt" "not finite on the whole GPU either: $ref"
		elif [[ $got != *"nonfinite_steps=0/"* ]]; then
			bad "priority-torch-share-finite-$dt" "non-finite outputs under an MPS share of ${GPUEXT_FINITE_SM:-40}% (the driver's kernels for a partitioned GPU, not gpuext's code: the whole GPU is finite): $got"
		elif ! awk -v a="${ref##*,}" -v b="${got##*,}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.05 * a) }'; then
			bad "priority-torch-share-finite-$dt" "last loss ${got##*,} under the share against ${ref##*,} on the whole GPU"
		else
			ok "priority-torch-share-finite-$dt"
		fi
	}
	if [[ ! -x $GPUEXTCTL ]] || ! "$PY" -c 'import torch, torchvision, torch_geometric' 2>/dev/null; then
		bad priority-torch "needs bin/gpuextctl (carry bin) and python3 with torch, torchvision, torch_geometric"
	else
		if [[ -n $MPS_CTL ]]; then
			for dt in ${GPUEXT_FINITE_DTYPES-bf16 fp32}; do tprio_finite "$dt"; done
		fi
		for run in $(seq 1 "$T_RUNS"); do
			tprio_run "$run" none alone
			for scen in $T_SCEN; do
				for mode in $T_MODES; do
					[[ $mode == mps* || $mode == gpuext-* ]] && [[ -z $MPS_CTL ]] && continue
					tprio_run "$run" "$scen" "$mode"
				done
			done
		done
		# per scenario and policy mode: each run's ratios (against that
		# run's alone and nopolicy), then min..max over the runs
		for scen in $T_SCEN; do
			for mode in $T_MODES; do
				[[ $mode == nopolicy ]] && continue
				s=$(S=$scen M=$mode awk '
					{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
					  r = v["run"]; m = v["mode"]
					  if (m == "alone") { ag[r] = v["lc_graph_p99_us"]; ae[r] = v["lc_eager_p99_us"] }
					  else if (v["scen"] == ENVIRON["S"] && m == "nopolicy") { ng[r] = v["lc_graph_p99_us"]; ne[r] = v["lc_eager_p99_us"]; nb[r] = v["be_steps_per_s"] }
					  else if (v["scen"] == ENVIRON["S"] && m == ENVIRON["M"]) { pg[r] = v["lc_graph_p99_us"]; pe[r] = v["lc_eager_p99_us"]; pb[r] = v["be_steps_per_s"]; runs[r] = 1 } }
					function upd(name, x) { if (!(name in lo) || x < lo[name]) lo[name] = x; if (!(name in hi) || x > hi[name]) hi[name] = x }
					END { met = 1; n = 0
					  for (r in runs) { if (!(r in ag) || !(r in ng) || pg[r] <= 0 || pe[r] <= 0 || nb[r] <= 0) { met = 0; continue }
					    n++
					    a = pg[r] / ag[r]; b = pe[r] / ae[r]; c = ng[r] / pg[r]; d = ne[r] / pe[r]; e = pb[r] / nb[r]
					    upd("ga", a); upd("ea", b); upd("gn", c); upd("en", d); upd("be", e)
					    if (a > 1.5 || b > 1.5 || c < 4 || d < 4 || e < 0.8) met = 0 }
					  if (n < 3) met = 0
					  printf "scen=%s mode=%s runs=%d lc p99/alone graph %.2f..%.2f eager %.2f..%.2f (<= 1.5); nopolicy/policy graph %.1f..%.1f eager %.1f..%.1f (>= 4); be policy/nopolicy %.2f..%.2f (>= 0.8) -> %s\n",
					    ENVIRON["S"], ENVIRON["M"], n, lo["ga"], hi["ga"], lo["ea"], hi["ea"], lo["gn"], hi["gn"], lo["en"], hi["en"], lo["be"], hi["be"], met ? "met" : "not met" }' "$T_RES")
				info "priority-torch targets $s"
				echo "targets $s" >>"$OUT/priority-torch-targets.txt"
				if [[ $s == *"-> met" ]]; then ok "priority-torch-$scen-$mode"; else bad "priority-torch-$scen-$mode" "targets not met on every run (at least 3): $s"; fi
			done
		done
	fi
fi
