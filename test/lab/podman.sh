#!/usr/bin/env bash
# podman.sh: podman (Debian 4.3) with private storage and the settings this host needs.
#
#   test/lab/podman.sh env            print `export VAR=...` lines (CONTAINERS_CONF, ...)
#   test/lab/podman.sh import         import the lab image (done on demand by run/create)
#   test/lab/podman.sh down           remove all lab containers, unmount, rmdir cgroups
#   test/lab/podman.sh clean          down, then delete its storage
#   test/lab/podman.sh ARGS...        podman <lab global flags> ARGS..., e.g.
#   test/lab/podman.sh run --rm --network none localhost/gpuext-busybox:lab env
#
# Global flags: --root $LAB_DIR/podman/root, --runroot and --tmpdir in
# $LAB_DIR/podman/run (or /tmp/gpuext-lab-<hash>/podman), --storage-driver vfs,
# --cgroup-manager cgroupfs, --events-backend file, --hooks-dir $GPUEXT_HOOKS_DIR
# (an empty private dir when unset, so host hooks never run).
# $LAB_DIR/podman/containers.conf sets default_ulimits nofile=1024:20000 and
# nproc=4096:4096 (raising rlimits fails here without CAP_SYS_RESOURCE) and the
# events log $LAB_DIR/podman/events.log. Container cgroups: /libpod_parent/libpod-<id>.
#
# Env:
#   GPUEXT_LAB_DIR          work dir (default $REPO/.cache/lab)
#   GPUEXT_HOOKS_DIR        OCI hooks dir (oci-hooks(5) JSON files) podman reads
#   GPUEXT_LAB_PODMAN_RUNTIME  OCI runtime binary (default runc)
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PM_DIR="$LAB_DIR/podman"
PM_RUN_DIR="$(lab_sock_dir podman)"
PM_ROOT="$PM_DIR/root"
PM_RUNROOT="$PM_RUN_DIR/runroot"
PM_TMPDIR="$PM_RUN_DIR/tmp"
PM_CONF="$PM_DIR/containers.conf"
PM_EVENTS="$PM_DIR/events.log"
PM_EMPTY_HOOKS="$PM_DIR/hooks.d"
PM_HOOKS="${GPUEXT_HOOKS_DIR:-$PM_EMPTY_HOOKS}"
PM_RUNTIME="${GPUEXT_LAB_PODMAN_RUNTIME:-$(command -v runc || echo runc)}"
PM_CGROUP_PREFIXES=(libpod_parent)

write_config() {
	mkdir -p "$PM_ROOT" "$PM_RUNROOT" "$PM_TMPDIR" "$PM_EMPTY_HOOKS"
	cat > "$PM_CONF.tmp" <<EOT
# Written by test/lab/podman.sh.
[containers]
default_ulimits = ["nofile=1024:20000", "nproc=4096:4096"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$PM_EVENTS"
hooks_dir = ["$PM_HOOKS"]
tmp_dir = "$PM_TMPDIR"
runtime = "$PM_RUNTIME"
EOT
	mv "$PM_CONF.tmp" "$PM_CONF"
}

podman_lab() {
	CONTAINERS_CONF="$PM_CONF" podman \
		--root "$PM_ROOT" --runroot "$PM_RUNROOT" --tmpdir "$PM_TMPDIR" \
		--storage-driver vfs --cgroup-manager cgroupfs --events-backend file \
		--runtime "$PM_RUNTIME" --hooks-dir "$PM_HOOKS" "$@"
}

print_env() {
	cat <<EOT
export CONTAINERS_CONF=$PM_CONF
export GPUEXT_LAB_PODMAN="$LAB_SCRIPTS/podman.sh"
export GPUEXT_LAB_PODMAN_ROOT=$PM_ROOT
export GPUEXT_LAB_PODMAN_RUNROOT=$PM_RUNROOT
export GPUEXT_LAB_PODMAN_EVENTS=$PM_EVENTS
export GPUEXT_LAB_PODMAN_HOOKS_DIR=$PM_HOOKS
export GPUEXT_LAB_IMAGE=$LAB_IMAGE
EOT
}

import_image() {
	podman_lab image exists "$LAB_IMAGE" && return 0
	[[ -f "$LAB_DIR/images/rootfs.tar" ]] || "$LAB_SCRIPTS/image.sh"
	lab_log "importing $LAB_IMAGE into podman storage"
	podman_lab import --quiet \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/sh"]' \
		"$LAB_DIR/images/rootfs.tar" "$LAB_IMAGE" >/dev/null
}

# conmon_pids: conmon processes of containers in our storage.
conmon_pids() {
	local p cmd
	for p in /proc/[0-9]*; do
		cmd="$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null)" || continue
		[[ "$cmd" == conmon* && "$cmd" == *"$PM_ROOT/"* ]] && echo "${p#/proc/}"
	done
	return 0
}

cmd_down() {
	lab_require_root
	local p
	if [[ -d "$PM_ROOT" ]]; then
		write_config
		podman_lab rm --all --force --time 2 >/dev/null 2>&1 || true
		podman_lab pod rm --all --force >/dev/null 2>&1 || true
	fi
	for p in $(conmon_pids); do
		lab_log "killing leftover conmon pid $p"
		kill -KILL "$p" 2>/dev/null || true
	done
	lab_umount_under "$PM_DIR"
	lab_umount_under "$PM_RUN_DIR"
	lab_rmdir_empty_cgroups "${PM_CGROUP_PREFIXES[@]}"
	local left
	left="$(lab_mounts_under "$PM_DIR")"
	[[ -z "$left" ]] || lab_log "still mounted: $left"
	lab_log "podman down"
}

case "${1:-}" in
	down | clean) lab_lock podman ;;
esac
case "${1:-}" in
	env) print_env ;;
	import) lab_require_root; write_config; import_image ;;
	down) cmd_down ;;
	clean)
		cmd_down
		lab_log "removing $PM_DIR"
		rm -rf "$PM_DIR"
		lab_rm_sock_dir "$PM_RUN_DIR"
		;;
	"" | -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
	*)
		lab_require_root
		write_config
		case "$1" in run | create) import_image ;; esac
		podman_lab "$@"
		;;
esac
