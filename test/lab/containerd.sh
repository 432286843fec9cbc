#!/usr/bin/env bash
# containerd.sh: a private containerd 2.x with CRI and NRI for the lab.
#
#   test/lab/containerd.sh up        start it (idempotent), import the lab images
#   test/lab/containerd.sh down      remove pods/containers, stop it, unmount, rmdir cgroups
#   test/lab/containerd.sh env       print `export VAR=...` lines for tests and scripts
#   test/lab/containerd.sh status    say whether it runs; list pods, containers, mounts
#   test/lab/containerd.sh crictl ARGS...   crictl against this containerd
#   test/lab/containerd.sh ctr ARGS...      ctr against this containerd (namespace k8s.io)
#   test/lab/containerd.sh clean     down, then delete its root/state (images, snapshots)
#
# Everything lives under $LAB_DIR/containerd: config.toml, containerd.log,
# containerd.pid, root/, state/, runc/ (runc --root), nri/plugins (plugin_path),
# nri/conf.d (plugin_config_path), pods/ (container logs), crictl.yaml.
# Sockets (containerd.sock, containerd.sock.ttrpc, nri.sock, shim dir s/) live
# in $LAB_DIR/containerd/run, or /tmp/gpuext-lab-<hash>/containerd when that
# path would be too long for a unix socket.
#
# Env:
#   GPUEXT_LAB_DIR        work dir (default $REPO/.cache/lab)
#   GPUEXT_LAB_BIN        where install-deps.sh put containerd/crictl (default $REPO/.cache/bin)
#   GPUEXT_LAB_RUNC       runc binary for the default runtime (default: runc from PATH)
#   GPUEXT_RUNC_WRAPPER   if set, adds CRI runtime handler "gpuext" running this binary as runc
#   GPUEXT_LAB_NRI_VALIDATOR  if set, turns on NRI's default validator: pods annotated
#                         required-plugins.noderesource.dev are refused while a plugin they
#                         name is not connected (docs/host-agent.md, "A mandatory plugin")
#   GPUEXT_LAB_LOG_LEVEL  containerd log level (default info)
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CTD_DIR="$LAB_DIR/containerd"
CTD_SOCK_DIR="$(lab_sock_dir containerd)"
CTD_CONFIG="$CTD_DIR/config.toml"
CTD_LOG="$CTD_DIR/containerd.log"
CTD_PID="$CTD_DIR/containerd.pid"
CTD_ROOT="$CTD_DIR/root"
CTD_STATE="$CTD_DIR/state"
CTD_RUNC_ROOT="$CTD_DIR/runc"
CTD_SOCK="$CTD_SOCK_DIR/containerd.sock"
CTD_NRI_SOCK="$CTD_SOCK_DIR/nri.sock"
CTD_NRI_PLUGIN_DIR="$CTD_DIR/nri/plugins"
CTD_NRI_CONF_DIR="$CTD_DIR/nri/conf.d"
CTD_CDI_DIR="$CTD_DIR/cdi"
CTD_POD_LOGS="$CTD_DIR/pods"
CTD_CRICTL_CONFIG="$CTD_DIR/crictl.yaml"
# Shim sockets: containerd refuses a socket_dir longer than 42 bytes.
CTD_SHIM_DIR="$CTD_SOCK_DIR/s"
if (( ${#CTD_SHIM_DIR} > 42 )); then
	CTD_SHIM_DIR="/tmp/gpuext-lab-$(printf '%s' "$LAB_DIR" | sha256sum | cut -c1-12)/s"
fi
# Cgroup prefixes CRI pods (cgroup_parent /kubepods/...) and ctr (/k8s.io/...) use.
CTD_CGROUP_PREFIXES=(kubepods kubepods.slice k8s.io default)

CONTAINERD="$LAB_BIN/containerd"
CTR="$LAB_BIN/ctr"
CRICTL="$LAB_BIN/crictl"
SHIM="$LAB_BIN/containerd-shim-runc-v2"

crictl() { "$CRICTL" --config "$CTD_CRICTL_CONFIG" "$@"; }
ctr() { "$CTR" --address "$CTD_SOCK" --namespace k8s.io "$@"; }

print_env() {
	cat <<EOT
export CONTAINERD_ADDRESS=$CTD_SOCK
export CONTAINERD_NAMESPACE=k8s.io
export CRI_ENDPOINT=unix://$CTD_SOCK
export CONTAINER_RUNTIME_ENDPOINT=unix://$CTD_SOCK
export IMAGE_SERVICE_ENDPOINT=unix://$CTD_SOCK
export CRI_CONFIG_FILE=$CTD_CRICTL_CONFIG
export NRI_SOCKET=$CTD_NRI_SOCK
export NRI_PLUGIN_DIR=$CTD_NRI_PLUGIN_DIR
export NRI_PLUGIN_CONFIG_DIR=$CTD_NRI_CONF_DIR
export GPUEXT_LAB_CONTAINERD_LOG=$CTD_LOG
export GPUEXT_LAB_CDI_DIR=$CTD_CDI_DIR
export GPUEXT_LAB_POD_LOG_DIR=$CTD_POD_LOGS
export GPUEXT_LAB_CRICTL=$CRICTL
export GPUEXT_LAB_CTR=$CTR
export GPUEXT_LAB_IMAGE=$LAB_IMAGE
export GPUEXT_LAB_PAUSE_IMAGE=$LAB_PAUSE_IMAGE
EOT
}

write_config() {
	local runc_bin="${GPUEXT_LAB_RUNC:-}"
	mkdir -p "$CTD_ROOT" "$CTD_STATE" "$CTD_RUNC_ROOT" "$CTD_NRI_PLUGIN_DIR" "$CTD_NRI_CONF_DIR" \
		"$CTD_CDI_DIR" "$CTD_POD_LOGS" "$CTD_SHIM_DIR" "$CTD_DIR/opt"
	chmod 0700 "$CTD_SHIM_DIR"
	{
		cat <<EOT
# Written by test/lab/containerd.sh; rewritten on every \`up\`.
version = 3
root = "$CTD_ROOT"
state = "$CTD_STATE"
imports = []

[grpc]
  address = "$CTD_SOCK"

[ttrpc]
  address = "$CTD_SOCK.ttrpc"

[plugins]
  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    # External plugins (e.g. a test binary) may connect to socket_path.
    disable_connections = false
    socket_path = "$CTD_NRI_SOCK"
    plugin_path = "$CTD_NRI_PLUGIN_DIR"
    plugin_config_path = "$CTD_NRI_CONF_DIR"
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
EOT
		if [[ -n "${GPUEXT_LAB_NRI_VALIDATOR:-}" ]]; then
			cat <<EOT
    [plugins.'io.containerd.nri.v1.nri'.default_validator]
      enable = true
EOT
		fi
		cat <<EOT

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "$CTD_SHIM_DIR"

  [plugins.'io.containerd.internal.v1.opt']
    path = "$CTD_DIR/opt"

  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = "$CTD_DIR/opt/image-verifier/bin"

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$LAB_PAUSE_IMAGE"

  [plugins.'io.containerd.cri.v1.runtime']
    # No CAP_SYS_RESOURCE here: never lower oom_score_adj below ours.
    restrict_oom_score_adj = true
    cdi_spec_dirs = ["$CTD_CDI_DIR"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$SHIM"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$CTD_RUNC_ROOT"
          BinaryName = "$runc_bin"
EOT
		if [[ -n "${GPUEXT_RUNC_WRAPPER:-}" ]]; then
			cat <<EOT
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpuext]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$SHIM"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpuext.options]
          SystemdCgroup = false
          Root = "$CTD_RUNC_ROOT"
          BinaryName = "$GPUEXT_RUNC_WRAPPER"
EOT
		fi
		cat <<EOT
    # Host-network pods only: no CNI config is installed.
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CTD_DIR/cni/bin"]
      conf_dir = "$CTD_DIR/cni/net.d"
EOT
	} > "$CTD_CONFIG.tmp"
	mv "$CTD_CONFIG.tmp" "$CTD_CONFIG"

	cat > "$CTD_CRICTL_CONFIG" <<EOT
runtime-endpoint: unix://$CTD_SOCK
image-endpoint: unix://$CTD_SOCK
timeout: 30
debug: false
pull-image-on-create: false
EOT
}

import_images() {
	[[ -f "$LAB_DIR/images/busybox-oci.tar" && -f "$LAB_DIR/images/pause-oci.tar" ]] \
		|| "$LAB_SCRIPTS/image.sh"
	local tar
	for tar in pause-oci.tar busybox-oci.tar; do
		# ctr repeats containerd's cgroup v1 deprecation warning on stderr: keep it for failures only.
		if ! ctr images import "$LAB_DIR/images/$tar" >"$CTD_DIR/import.log" 2>&1; then
			cat "$CTD_DIR/import.log" >&2
			lab_die "ctr images import $tar failed"
		fi
	done
	# CRI learns of an imported image from containerd's image events, not at
	# once: under load the first look can come before the event (seen in CI).
	local img i
	for img in "$LAB_IMAGE" "$LAB_PAUSE_IMAGE"; do
		for i in $(seq 50); do
			crictl inspecti "$img" >/dev/null 2>&1 && break
			(( i == 50 )) && { crictl inspecti "$img" >&2 || true; lab_die "CRI does not see $img 10 s after import"; }
			sleep 0.2
		done
	done
}

cmd_up() {
	lab_require_root
	local b
	for b in "$CONTAINERD" "$CTR" "$CRICTL" "$SHIM"; do
		[[ -x "$b" ]] || lab_die "$b missing: run test/lab/install-deps.sh"
	done
	if lab_pid_alive "$CTD_PID"; then
		lab_log "containerd already running (pid $(cat "$CTD_PID")), socket $CTD_SOCK"
		return 0
	fi
	local start=$SECONDS
	write_config
	rm -f "$CTD_SOCK" "$CTD_SOCK.ttrpc" "$CTD_NRI_SOCK"
	lab_log "starting containerd $LAB_CONTAINERD_VERSION (log $CTD_LOG)"
	# Our bin dir first: Debian's docker.io ships an old containerd-shim-runc-v2 in /usr/bin.
	# setsid: keep containerd out of the caller's process group and terminal.
	PATH="$LAB_BIN:$PATH" setsid "$CONTAINERD" --config "$CTD_CONFIG" \
		--log-level "${GPUEXT_LAB_LOG_LEVEL:-info}" </dev/null >>"$CTD_LOG" 2>&1 9>&- &
	echo $! > "$CTD_PID"
	if ! lab_wait 30 "crictl info" crictl info; then
		tail -n 30 "$CTD_LOG" >&2 || true
		lab_pid_alive "$CTD_PID" || lab_die "containerd exited during startup (log $CTD_LOG)"
		lab_die "containerd did not answer CRI within 30s (log $CTD_LOG)"
	fi
	lab_wait 10 "nri socket" test -S "$CTD_NRI_SOCK" || lab_die "NRI socket $CTD_NRI_SOCK did not appear (log $CTD_LOG)"
	import_images
	lab_log "containerd up in $(( SECONDS - start ))s: pid $(cat "$CTD_PID"), CRI unix://$CTD_SOCK, NRI $CTD_NRI_SOCK"
}

# shim_pids: pids of containerd-shim-runc-v2 processes serving our containerd.
shim_pids() {
	local p cmd
	for p in /proc/[0-9]*; do
		cmd="$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null)" || continue
		[[ "$cmd" == *containerd-shim-runc-v2* && "$cmd" == *"-address $CTD_SOCK "* ]] && echo "${p#/proc/}"
	done
	return 0
}

# runc_ids NS: container ids runc still knows under our runc root.
runc_ids() {
	local ns="$1"
	[[ -d "$CTD_RUNC_ROOT/$ns" ]] || return 0
	"${GPUEXT_LAB_RUNC:-runc}" --root "$CTD_RUNC_ROOT/$ns" list -q 2>/dev/null || true
}

cmd_down() {
	lab_require_root
	local id ns p
	if lab_pid_alive "$CTD_PID" && crictl info >/dev/null 2>&1; then
		for id in $(crictl ps -aq 2>/dev/null); do
			crictl stop --timeout 2 "$id" >/dev/null 2>&1 || true
			crictl rm -f "$id" >/dev/null 2>&1 || true
		done
		for id in $(crictl pods -q 2>/dev/null); do
			crictl stopp "$id" >/dev/null 2>&1 || true
			crictl rmp -f "$id" >/dev/null 2>&1 || true
		done
		# Containers made with plain ctr (any namespace).
		for ns in $("$CTR" --address "$CTD_SOCK" namespaces ls -q 2>/dev/null); do
			for id in $("$CTR" --address "$CTD_SOCK" -n "$ns" tasks ls -q 2>/dev/null); do
				"$CTR" --address "$CTD_SOCK" -n "$ns" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
				"$CTR" --address "$CTD_SOCK" -n "$ns" tasks rm -f "$id" >/dev/null 2>&1 || true
			done
			for id in $("$CTR" --address "$CTD_SOCK" -n "$ns" containers ls -q 2>/dev/null); do
				"$CTR" --address "$CTD_SOCK" -n "$ns" containers rm "$id" >/dev/null 2>&1 || true
			done
		done
	fi
	if [[ -s "$CTD_PID" ]]; then
		lab_log "stopping containerd (pid $(cat "$CTD_PID"))"
	fi
	lab_stop_pid "$CTD_PID" 20
	# Containers whose shim outlived containerd: kill them through runc, then the shims.
	if [[ -d "$CTD_RUNC_ROOT" ]]; then
		for ns in "$CTD_RUNC_ROOT"/*; do
			[[ -d "$ns" ]] || continue
			ns="${ns##*/}"
			for id in $(runc_ids "$ns"); do
				lab_log "killing leftover container $ns/$id"
				"${GPUEXT_LAB_RUNC:-runc}" --root "$CTD_RUNC_ROOT/$ns" kill "$id" KILL >/dev/null 2>&1 || true
				"${GPUEXT_LAB_RUNC:-runc}" --root "$CTD_RUNC_ROOT/$ns" delete -f "$id" >/dev/null 2>&1 || true
			done
		done
	fi
	for p in $(shim_pids); do
		lab_log "killing leftover shim pid $p"
		kill -KILL "$p" 2>/dev/null || true
	done
	lab_umount_under "$CTD_DIR"
	lab_umount_under "$CTD_SHIM_DIR"
	rm -f "$CTD_SOCK" "$CTD_SOCK.ttrpc" "$CTD_NRI_SOCK"
	lab_rmdir_empty_cgroups "${CTD_CGROUP_PREFIXES[@]}"
	local left
	left="$(lab_mounts_under "$CTD_DIR")"
	[[ -z "$left" ]] || lab_log "still mounted: $left"
	left="$(shim_pids)"
	[[ -z "$left" ]] || lab_log "shims still running: $left"
	left="$(lab_leftover_cgroups "${CTD_CGROUP_PREFIXES[@]}")"
	[[ -z "$left" ]] || lab_log "cgroups left (busy or not ours): $(tr '\n' ' ' <<<"$left")"
	lab_log "containerd down"
}

cmd_status() {
	if lab_pid_alive "$CTD_PID"; then
		echo "containerd: running, pid $(cat "$CTD_PID"), socket $CTD_SOCK"
		crictl pods || true
		crictl ps -a || true
	else
		echo "containerd: not running"
	fi
	echo "mounts under $CTD_DIR:"
	lab_mounts_under "$CTD_DIR" | sed 's/^/  /'
	echo "shims: $(shim_pids | tr '\n' ' ')"
}

cmd_clean() {
	cmd_down
	lab_log "removing $CTD_DIR"
	rm -rf "$CTD_DIR"
	lab_rm_sock_dir "$CTD_SHIM_DIR"
	lab_rm_sock_dir "$CTD_SOCK_DIR"
}

case "${1:-}" in
	up | down | clean) lab_lock containerd ;;
esac
case "${1:-}" in
	up) cmd_up ;;
	down) cmd_down ;;
	env) print_env ;;
	status) cmd_status ;;
	clean) cmd_clean ;;
	crictl) shift; crictl "$@" ;;
	ctr) shift; ctr "$@" ;;
	*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
