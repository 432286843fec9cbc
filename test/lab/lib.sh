# shellcheck shell=bash disable=SC2034
# lib.sh: shared settings for the test/lab scripts. Sourced, never executed.
#
# Every lab script keeps its state under one work dir, LAB_DIR, so that
# several checkouts can run labs side by side and `rm -rf` of that dir
# (after the `down` commands) leaves the host as it was.

# Resolve the repository root from this file's location, never from $PWD.
LAB_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$LAB_SCRIPTS/../.." && pwd -P)"

# Tool binaries built by install-deps.sh (containerd, ctr, shim, crictl).
LAB_BIN="${GPUEXT_LAB_BIN:-$REPO/.cache/bin}"
# Private work dir of all daemons started by the lab.
LAB_DIR="${GPUEXT_LAB_DIR:-$REPO/.cache/lab}"
mkdir -p "$LAB_DIR"
LAB_DIR="$(cd "$LAB_DIR" && pwd -P)"   # runc and containerd want absolute, symlink-free paths

# Pinned versions (install-deps.sh builds exactly these).
LAB_CONTAINERD_VERSION="v2.4.2"
LAB_CRICTL_VERSION="v1.37.0"

# Image names used by every runtime in the lab.
LAB_IMAGE="localhost/gpuext-busybox:lab"
LAB_PAUSE_IMAGE="localhost/gpuext-pause:lab"
LAB_HOSTFS_IMAGE="localhost/gpuext-hostfs:lab"

# Debian's docker.io puts a newer client in /usr/local/bin on some hosts;
# that one negotiates down the API of dockerd 20.10. Always use Debian's.
LAB_DOCKER_CLI="/usr/bin/docker"

lab_log() { printf '[lab] %s\n' "$*" >&2; }
lab_die() { printf '[lab] ERROR: %s\n' "$*" >&2; exit 1; }

lab_require_root() {
	[[ "$(id -u)" == 0 ]] || lab_die "must run as root (containers, mounts and cgroups need it)"
}

# lab_sock_dir NAME: a directory for unix sockets of daemon NAME.
# Socket paths must stay under 108 bytes (sun_path). When LAB_DIR is too
# deep, fall back to a short per-LAB_DIR directory under /tmp.
lab_sock_dir() {
	local name="$1" dir="$LAB_DIR/$1/run"
	# 40 bytes of headroom for the longest socket name we put there.
	if (( ${#dir} > 60 )); then
		local h
		h="$(printf '%s' "$LAB_DIR" | sha256sum | cut -c1-12)"
		dir="/tmp/gpuext-lab-$h/$name"
	fi
	mkdir -p "$dir"
	printf '%s\n' "$dir"
}

# lab_wait SECONDS DESCRIPTION CMD...: retry CMD every 0.2 s until it succeeds.
lab_wait() {
	local secs="$1" what="$2"; shift 2
	local deadline=$(( SECONDS + secs ))
	until "$@" >/dev/null 2>&1; do
		(( SECONDS < deadline )) || return 1
		sleep 0.2
	done
}

# lab_pid_alive PIDFILE: true when the pid in PIDFILE runs.
lab_pid_alive() {
	local pid
	[[ -s "$1" ]] || return 1
	pid="$(cat "$1")"
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

# lab_stop_pid PIDFILE [SECONDS]: SIGTERM the pid in PIDFILE, SIGKILL after
# SECONDS (default 15), then remove the pidfile.
lab_stop_pid() {
	local file="$1" secs="${2:-15}" pid
	[[ -s "$file" ]] || { rm -f "$file"; return 0; }
	pid="$(cat "$file")"
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		local deadline=$(( SECONDS + secs ))
		while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then
			lab_log "pid $pid did not stop in ${secs}s, sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
		fi
	fi
	rm -f "$file"
}

# lab_umount_under DIR: unmount everything mounted at or below DIR, deepest first.
lab_umount_under() {
	local dir="$1" m
	[[ -d "$dir" ]] || return 0
	dir="$(cd "$dir" && pwd -P)"
	# /proc/self/mountinfo field 5 is the mount point (octal-escaped spaces).
	while read -r m; do
		[[ -n "$m" ]] || continue
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || lab_log "could not unmount $m"
	done < <(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
}

# lab_mounts_under DIR: print mount points at or below DIR (for checks).
lab_mounts_under() {
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo
}

# lab_cgroup_roots: every mounted cgroup hierarchy root (v1 controllers and v2).
lab_cgroup_roots() {
	awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts
}

# lab_rmdir_empty_cgroups PREFIX...: remove empty cgroup dirs below
# <root>/PREFIX in every hierarchy, deepest first. rmdir of a cgroup fails
# (EBUSY) while it has tasks or children, so live cgroups survive.
lab_rmdir_empty_cgroups() {
	local root prefix d
	while read -r root; do
		for prefix in "$@"; do
			[[ -d "$root/$prefix" ]] || continue
			while read -r d; do
				rmdir "$d" 2>/dev/null || true
			done < <(find "$root/$prefix" -depth -type d 2>/dev/null)
		done
	done < <(lab_cgroup_roots)
}

# lab_leftover_cgroups PREFIX...: print the cgroup dirs still present below the prefixes.
lab_leftover_cgroups() {
	local root prefix
	while read -r root; do
		for prefix in "$@"; do
			[[ -d "$root/$prefix" ]] && find "$root/$prefix" -type d
		done
	done < <(lab_cgroup_roots)
	return 0
}

# lab_rm_sock_dir DIR: remove a socket dir made by lab_sock_dir outside LAB_DIR
# (and its /tmp/gpuext-lab-<hash> parent once empty).
lab_rm_sock_dir() {
	local dir="$1"
	[[ "$dir" == "$LAB_DIR"/* ]] && return 0
	rm -rf "$dir"
	rmdir "$(dirname "$dir")" 2>/dev/null || true
}

# lab_lock NAME: hold an exclusive lock on $LAB_DIR/NAME.lock until the
# script exits, so that two callers sharing LAB_DIR never start or stop a
# daemon at the same time. Daemons started under the lock must get `9>&-`.
lab_lock() {
	exec 9>"$LAB_DIR/$1.lock"
	flock -w 300 9 || lab_die "timed out waiting for $LAB_DIR/$1.lock"
}
