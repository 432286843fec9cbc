#!/usr/bin/env bash
# phases.sh TARGET...: `make test`'s phases, one make target each, in order,
# stopping at the first that fails (as make's prerequisites did). At the end,
# whether it passed or not, one line per phase with its seconds, so that a
# cold run says where its time went (`.ci/run` prints the same lines).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
names=() secs=() results=()
t0=$SECONDS
summary() {
	local i
	echo "[test] phases:"
	for i in "${!names[@]}"; do
		printf '[test]   %-12s %5ss  %s\n' "${names[$i]}" "${secs[$i]}" "${results[$i]}"
	done
	printf '[test]   %-12s %5ss\n' total "$((SECONDS - t0))"
}
rc=0
for phase in "$@"; do
	start=$SECONDS
	echo "[test] phase $phase"
	if make --no-print-directory -C "$REPO" "$phase"; then result=ok; else rc=$?; result="FAIL (exit $rc)"; fi
	names+=("$phase") secs+=("$((SECONDS - start))") results+=("$result")
	((rc == 0)) || break
done
summary
exit "$rc"
