#!/usr/bin/env bash
# dockerd.sh: a private dockerd (Debian docker.io 20.10) for the lab.
#
#   test/lab/dockerd.sh up            start it (idempotent), import the lab image
#   test/lab/dockerd.sh down          remove containers, stop dockerd, unmount, rmdir cgroups
#   test/lab/dockerd.sh env           print `export VAR=...` lines (DOCKER_HOST, ...)
#   test/lab/dockerd.sh status        say whether it runs, list containers
#   test/lab/dockerd.sh docker ARGS...  /usr/bin/docker against this daemon
#   test/lab/dockerd.sh clean         down, then delete its data-root
#
# Files under $LAB_DIR/docker: daemon.json, dockerd.log, dockerd.pid, data/
# (data-root; container labels are in data/containers/<id>/config.v2.json).
# Socket docker.sock and exec-root exec/ live in $LAB_DIR/docker/run (or
# /tmp/gpuext-lab-<hash>/docker if that path is too long for unix sockets).
# Storage driver vfs, no iptables, no bridge: run containers with --network none.
# Container cgroups: /docker/<id> (cgroupfs driver) in every hierarchy.
#
# Env:
#   GPUEXT_LAB_DIR        work dir (default $REPO/.cache/lab)
#   GPUEXT_RUNC_WRAPPER   if set, registers runtime "gpuext" with this path
#                         (use: docker run --runtime gpuext ...)
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DK_DIR="$LAB_DIR/docker"
DK_SOCK_DIR="$(lab_sock_dir docker)"
DK_CONFIG="$DK_DIR/daemon.json"
DK_LOG="$DK_DIR/dockerd.log"
DK_PID="$DK_DIR/dockerd.pid"
DK_DATA="$DK_DIR/data"
DK_EXEC="$DK_SOCK_DIR/exec"
DK_SOCK="$DK_SOCK_DIR/docker.sock"
DK_HOST="unix://$DK_SOCK"
DK_CGROUP_PREFIXES=(docker)

docker() { "$LAB_DOCKER_CLI" -H "$DK_HOST" "$@"; }

print_env() {
	cat <<EOT
export DOCKER_HOST=$DK_HOST
export GPUEXT_LAB_DOCKER=$LAB_DOCKER_CLI
export GPUEXT_LAB_DOCKER_DATA_ROOT=$DK_DATA
export GPUEXT_LAB_DOCKERD_LOG=$DK_LOG
export GPUEXT_LAB_IMAGE=$LAB_IMAGE
EOT
}

write_config() {
	mkdir -p "$DK_DATA" "$DK_EXEC"
	local runtimes=""
	if [[ -n "${GPUEXT_RUNC_WRAPPER:-}" ]]; then
		[[ "$GPUEXT_RUNC_WRAPPER" == /* ]] || lab_die "GPUEXT_RUNC_WRAPPER must be an absolute path"
		runtimes=",
  \"runtimes\": { \"gpuext\": { \"path\": \"$GPUEXT_RUNC_WRAPPER\" } }"
	fi
	cat > "$DK_CONFIG.tmp" <<EOT
{
  "data-root": "$DK_DATA",
  "exec-root": "$DK_EXEC",
  "pidfile": "$DK_PID",
  "hosts": ["$DK_HOST"],
  "iptables": false,
  "ip6tables": false,
  "ip-forward": false,
  "ip-masq": false,
  "bridge": "none",
  "userland-proxy": false,
  "storage-driver": "vfs",
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "log-driver": "json-file",
  "features": { "buildkit": false }$runtimes
}
EOT
	mv "$DK_CONFIG.tmp" "$DK_CONFIG"
}

import_image() {
	[[ -f "$LAB_DIR/images/rootfs.tar" ]] || "$LAB_SCRIPTS/image.sh"
	if docker image inspect "$LAB_IMAGE" >/dev/null 2>&1; then
		return 0
	fi
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/sh"]' \
		"$LAB_DIR/images/rootfs.tar" "$LAB_IMAGE" >/dev/null
}

cmd_up() {
	lab_require_root
	command -v dockerd >/dev/null || lab_die "dockerd missing: run test/lab/install-deps.sh"
	[[ -x "$LAB_DOCKER_CLI" ]] || lab_die "$LAB_DOCKER_CLI missing: run test/lab/install-deps.sh"
	if lab_pid_alive "$DK_PID"; then
		lab_log "dockerd already running (pid $(cat "$DK_PID")), $DK_HOST"
		return 0
	fi
	local start=$SECONDS
	write_config
	rm -f "$DK_SOCK" "$DK_PID"
	lab_log "starting dockerd $(dockerd --version | awk '{print $3}' | tr -d ,) (log $DK_LOG)"
	# dockerd writes the pidfile itself; record $! too in case it dies first.
	setsid dockerd --config-file "$DK_CONFIG" </dev/null >>"$DK_LOG" 2>&1 9>&- &
	local pid=$!
	if ! lab_wait 60 "docker info" docker info; then
		tail -n 30 "$DK_LOG" >&2 || true
		kill -0 "$pid" 2>/dev/null || lab_die "dockerd exited during startup (log $DK_LOG)"
		lab_die "dockerd did not answer within 60s (log $DK_LOG)"
	fi
	echo "$pid" > "$DK_PID"
	import_image
	lab_log "dockerd up in $(( SECONDS - start ))s: pid $pid, DOCKER_HOST=$DK_HOST, image $LAB_IMAGE"
}

# exec_root_pids: processes (dockerd's containerd, shims) started for our exec-root.
exec_root_pids() {
	local p cmd
	for p in /proc/[0-9]*; do
		cmd="$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null)" || continue
		[[ "$cmd" == *"$DK_EXEC/"* ]] && echo "${p#/proc/}"
	done
	return 0
}

cmd_down() {
	lab_require_root
	local id p
	if lab_pid_alive "$DK_PID" && docker info >/dev/null 2>&1; then
		for id in $(docker ps -aq 2>/dev/null); do
			docker rm -f "$id" >/dev/null 2>&1 || true
		done
	fi
	[[ -s "$DK_PID" ]] && lab_log "stopping dockerd (pid $(cat "$DK_PID"))"
	lab_stop_pid "$DK_PID" 30
	for p in $(exec_root_pids); do
		lab_log "killing leftover pid $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-60))"
		kill -KILL "$p" 2>/dev/null || true
	done
	lab_umount_under "$DK_DIR"
	lab_umount_under "$DK_SOCK_DIR"
	rm -f "$DK_SOCK"
	lab_rmdir_empty_cgroups "${DK_CGROUP_PREFIXES[@]}"
	local left
	left="$(lab_mounts_under "$DK_DIR")"
	[[ -z "$left" ]] || lab_log "still mounted: $left"
	lab_log "dockerd down"
}

cmd_status() {
	if lab_pid_alive "$DK_PID"; then
		echo "dockerd: running, pid $(cat "$DK_PID"), $DK_HOST"
		docker ps -a || true
	else
		echo "dockerd: not running"
	fi
	echo "mounts under $DK_DIR:"
	lab_mounts_under "$DK_DIR" | sed 's/^/  /'
}

cmd_clean() {
	cmd_down
	lab_log "removing $DK_DIR"
	rm -rf "$DK_DIR"
	lab_rm_sock_dir "$DK_SOCK_DIR"
}

case "${1:-}" in
	up | down | clean) lab_lock docker ;;
esac
case "${1:-}" in
	up) cmd_up ;;
	down) cmd_down ;;
	env) print_env ;;
	status) cmd_status ;;
	clean) cmd_clean ;;
	docker) shift; docker "$@" ;;
	*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
