#!/usr/bin/env bash
# smoke.sh: prove the lab works end to end on this host. Needs root.
#
#   test/lab/smoke.sh [containerd|docker|podman|all]   (default all)
#
# containerd: up, an external NRI plugin (nriprobe) connects and adds an env
#   var, a CRI pod's container sees it, the probe saw the pod annotation and
#   the cgroups path, the container has a cgroup v2 dir, then down leaves no
#   mounts, shims or kubepods cgroups.
# docker: up, `docker run --rm --network none --label x=y IMG env`, down.
# podman: `podman run --rm --network none IMG env` with rlimits in range, down.
# Prints "[lab] PASS <what>" per check; exits non-zero on the first failure.
#
# Env: GPUEXT_LAB_SKIP_DEPS=1 skips install-deps.sh; all lab env vars apply.
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
lab_require_root

what="${1:-all}"
L="$LAB_SCRIPTS"
PROBE_PID="$LAB_DIR/nriprobe.pid"
PROBE_OUT="$LAB_DIR/nriprobe.jsonl"

pass() { lab_log "PASS $*"; }
fail() { lab_die "FAIL $*"; }

cleanup() {
	local rc=$?
	lab_stop_pid "$PROBE_PID" 5
	case "$what" in containerd | all) "$L/containerd.sh" down >/dev/null 2>&1 || true ;; esac
	case "$what" in docker | all) "$L/dockerd.sh" down >/dev/null 2>&1 || true ;; esac
	case "$what" in podman | all) "$L/podman.sh" down >/dev/null 2>&1 || true ;; esac
	exit "$rc"
}
trap cleanup EXIT

cgroup2_root() { awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts; }

smoke_containerd() {
	lab_log "building nriprobe (test/lab/nriprobe, its own Go module)"
	(cd "$L/nriprobe" && GOFLAGS='' go build -o "$LAB_BIN/nriprobe" .)
	"$L/containerd.sh" up
	eval "$("$L/containerd.sh" env)"

	rm -f "$PROBE_OUT"
	setsid "$LAB_BIN/nriprobe" -socket "$NRI_SOCKET" -out "$PROBE_OUT" \
		-add-env GPUEXT_PROBE=injected </dev/null >>"$LAB_DIR/nriprobe.log" 2>&1 &
	echo $! > "$PROBE_PID"
	lab_wait 10 "nriprobe sync" grep -q '"Synchronize"' "$PROBE_OUT" \
		|| fail "nriprobe did not connect to $NRI_SOCKET (see $LAB_DIR/nriprobe.log)"
	pass "external NRI plugin connected to $NRI_SOCKET"

	local pod ctr pid cg v2 out
	read -r pod ctr < <("$L/cri.sh" run -p policy.gpuext.io/pod=smoke smoke \
		'env; grep "^0::" /proc/self/cgroup; echo ready; exec sleep 300')
	lab_wait 10 "container output" grep -q ready "$GPUEXT_LAB_POD_LOG_DIR/smoke/smoke.log" \
		|| fail "container printed nothing"
	out="$("$L/cri.sh" logs "$ctr" 2>&1)"
	grep -qx 'GPUEXT_LAB=1' <<<"$out" || fail "container env lacks GPUEXT_LAB=1: $out"
	grep -qx 'GPUEXT_PROBE=injected' <<<"$out" || fail "NRI AddEnv did not reach the container: $out"
	pass "CRI container ran; env has the spec's var and the NRI-injected var"

	# (no `grep | grep -q`: with pipefail an early-exiting grep -q fails the pipe)
	local events
	events="$(grep '"CreateContainer"' "$PROBE_OUT" || true)"
	grep -q '"cgroups_path":"/kubepods/besteffort/pod' <<<"$events" \
		|| fail "probe saw no CreateContainer with a kubepods cgroups path"
	events="$(grep '"RunPodSandbox"' "$PROBE_OUT" || true)"
	grep -q '"policy.gpuext.io/pod":"smoke"' <<<"$events" \
		|| fail "probe saw no pod annotation"
	pass "NRI delivered pod annotations and Linux.CgroupsPath"

	pid="$("$L/cri.sh" pid "$ctr")"
	cg="$(awk -F: '$1 == "0" { print $3 }' "/proc/$pid/cgroup")"
	v2="$(cgroup2_root)$cg"
	[[ -d "$v2" ]] || fail "no cgroup v2 dir $v2 for container pid $pid"
	grep -qx "$pid" "$v2/cgroup.procs" || fail "pid $pid not in $v2/cgroup.procs"
	pass "container pid $pid is in cgroup v2 $v2 (id $(stat -c %i "$v2"))"

	"$L/cri.sh" rm "$pod"
	grep -q '"RemovePodSandbox"' "$PROBE_OUT" || fail "probe saw no RemovePodSandbox"
	lab_stop_pid "$PROBE_PID" 5
	"$L/containerd.sh" down
	[[ -z "$(lab_mounts_under "$LAB_DIR/containerd")" ]] || fail "mounts left under $LAB_DIR/containerd"
	[[ ! -e "$v2" ]] || fail "cgroup $v2 left behind"
	[[ -z "$(lab_leftover_cgroups kubepods)" ]] || fail "kubepods cgroups left: $(lab_leftover_cgroups kubepods)"
	pass "containerd down: nothing mounted, no cgroups left"
}

smoke_docker() {
	"$L/dockerd.sh" up
	local out
	out="$("$L/dockerd.sh" docker run --rm --network none --label x=y "$LAB_IMAGE" env)"
	grep -q '^PATH=' <<<"$out" || fail "docker run printed no env: $out"
	pass "docker run --rm --network none --label x=y $LAB_IMAGE env"
	"$L/dockerd.sh" down
	[[ -z "$(lab_mounts_under "$LAB_DIR/docker")" ]] || fail "mounts left under $LAB_DIR/docker"
	pass "dockerd down: nothing mounted"
}

smoke_podman() {
	local out
	# shellcheck disable=SC2016 # expanded inside the container
	out="$("$L/podman.sh" run --rm --network none "$LAB_IMAGE" sh -c 'env; echo nofile=$(ulimit -Hn)')"
	grep -q '^PATH=' <<<"$out" || fail "podman run printed no env: $out"
	grep -qx 'nofile=20000' <<<"$out" || fail "podman ulimit not applied: $out"
	pass "podman run --rm --network none $LAB_IMAGE env"
	"$L/podman.sh" down
	[[ -z "$(lab_mounts_under "$LAB_DIR/podman")" ]] || fail "mounts left under $LAB_DIR/podman"
	pass "podman down: nothing mounted"
}

start=$SECONDS
[[ "${GPUEXT_LAB_SKIP_DEPS:-0}" == 1 ]] || "$L/install-deps.sh"
"$L/image.sh"
case "$what" in
	containerd) smoke_containerd ;;
	docker) smoke_docker ;;
	podman) smoke_podman ;;
	all) smoke_containerd; smoke_docker; smoke_podman ;;
	*) lab_die "usage: smoke.sh [containerd|docker|podman|all]" ;;
esac
lab_log "smoke ($what) passed in $(( SECONDS - start ))s"
