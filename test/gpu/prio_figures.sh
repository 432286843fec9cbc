# prio_figures.sh - sourced by test/gpu/priority_torch.sh and
# test/gpu-node/priority.sh: the figures of one priority run, read from the
# outputs of test/gpu/prio_torch.py.
# shellcheck shell=bash

# prio_figures DIR: prints "lc_graph_p50_us=.. lc_graph_p99_us=.. lc_eager_p50_us=..
# lc_eager_p99_us=.. be_steps_per_s=.." from DIR/lc.txt (the latency-critical
# process) and DIR/be*.txt (the trainers: their steps per second over the
# latency-critical window, summed); nothing, and status 1, when lc.txt has
# no window (the latency-critical process failed).
prio_figures() {
	local d=$1 w0 w1 be=0 line="" k f
	read -r w0 w1 < <(awk '/^lc_window_us/ {print $2, $3}' "$d/lc.txt" 2>/dev/null)
	[[ -n $w0 ]] || return 1
	for f in "$d"/be*.txt; do
		[[ -e $f ]] || continue
		awk -v a="$w0" -v b="$w1" '/^be_tick/ { if (!t0 || $2 <= a) {t0 = $2; n0 = $3} if ($2 <= b) {t1 = $2; n1 = $3} }
			END {if (t1 > t0) printf "%.3f\n", (n1 - n0) / ((t1 - t0) / 1e6); else print 0}' "$f"
	done | awk '{s += $1} END {printf "%.2f", s}' >"$d/.be_sum"
	be=$(cat "$d/.be_sum"); rm -f "$d/.be_sum"
	for k in graph_p50 graph_p99 eager_p50 eager_p99; do line="$line lc_${k}_us=$(awk -v k="lc_${k}_us" '$1 == k {print $2}' "$d/lc.txt")"; done
	echo "${line# } be_steps_per_s=${be:-0}"
}
