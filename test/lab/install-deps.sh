#!/usr/bin/env bash
# install-deps.sh: install what the container lab needs. Idempotent.
#
#   test/lab/install-deps.sh
#
# - apt packages: runc, busybox-static, docker.io, podman, BPF toolchain,
#   libseccomp (apt-get update runs once, and only if something is missing).
# - containerd, ctr, containerd-shim-runc-v2 (v2.4.2) and crictl (v1.37.0),
#   built with `go install` into $GPUEXT_LAB_BIN (default $REPO/.cache/bin).
#   A stamp file records the versions; a rebuild happens only when it is stale.
#
# Env: GPUEXT_LAB_BIN, GPUEXT_LAB_SKIP_APT=1 (skip the apt step).
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$SECONDS

# Binaries we need -> the apt package that provides them, plus libraries.
APT_PACKAGES=(
	runc busybox-static docker.io podman conmon
	iproute2 iptables ca-certificates tar coreutils util-linux procps
	libseccomp2 libseccomp-dev
	clang llvm libbpf-dev bpftool
)

install_apt() {
	local missing=() p
	for p in "${APT_PACKAGES[@]}"; do
		# dpkg-query prints "install ok installed" for a fully installed package.
		if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
			missing+=("$p")
		fi
	done
	if (( ${#missing[@]} == 0 )); then
		lab_log "apt packages present (${#APT_PACKAGES[@]})"
		return
	fi
	lab_require_root
	lab_log "installing apt packages: ${missing[*]} (~1-2 min)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# stamp_ok FILE LINE: FILE holds LINE and every binary it names exists.
STAMP="$LAB_BIN/.gpuext-lab-versions"

have_go_tools() {
	local want="$1" b
	[[ -f "$STAMP" ]] && grep -qxF "$want" "$STAMP" || return 1
	shift
	for b in "$@"; do [[ -x "$LAB_BIN/$b" ]] || return 1; done
}

record_stamp() {
	local line="$1" key="${1%% *}"
	touch "$STAMP"
	grep -v "^$key " "$STAMP" > "$STAMP.tmp" || true
	printf '%s\n' "$line" >> "$STAMP.tmp"
	mv "$STAMP.tmp" "$STAMP"
}

install_go_tools() {
	command -v go >/dev/null || lab_die "go toolchain not found in PATH"
	mkdir -p "$LAB_BIN"
	# Build outside the repo module: go install pkg@version ignores go.mod,
	# but GOFLAGS=-mod=... from the caller would break it.
	local ctd_line="containerd $LAB_CONTAINERD_VERSION"
	if have_go_tools "$ctd_line" containerd ctr containerd-shim-runc-v2; then
		lab_log "containerd $LAB_CONTAINERD_VERSION present in $LAB_BIN"
	else
		lab_log "building containerd $LAB_CONTAINERD_VERSION (cached after first run, ~4 min)"
		(cd "$LAB_BIN" && GOFLAGS='' GOBIN="$LAB_BIN" go install \
			"github.com/containerd/containerd/v2/cmd/containerd@$LAB_CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/ctr@$LAB_CONTAINERD_VERSION" \
			"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$LAB_CONTAINERD_VERSION")
		record_stamp "$ctd_line"
	fi
	local crictl_line="crictl $LAB_CRICTL_VERSION"
	if have_go_tools "$crictl_line" crictl; then
		lab_log "crictl $LAB_CRICTL_VERSION present in $LAB_BIN"
	else
		lab_log "building crictl $LAB_CRICTL_VERSION (cached after first run, ~1 min)"
		(cd "$LAB_BIN" && GOFLAGS='' GOBIN="$LAB_BIN" go install "sigs.k8s.io/cri-tools/cmd/crictl@$LAB_CRICTL_VERSION")
		record_stamp "$crictl_line"
	fi
}

# timed NAME CMD...: run a step and keep its seconds for the summary line.
steps=()
timed() {
	local name=$1 t=$SECONDS
	shift
	"$@"
	steps+=("$name $(( SECONDS - t ))s")
}

if [[ "${GPUEXT_LAB_SKIP_APT:-0}" != 1 ]]; then
	timed apt install_apt
fi
timed containerd+crictl install_go_tools
timed prometheus "$LAB_SCRIPTS/install-prometheus.sh" # the Prometheus server the metrics e2e test scrapes the agent with
timed kubernetes "$REPO/test/k8s/install.sh" # etcd, the Kubernetes components and helm of the k8s lab (test/k8s)
lab_log "deps ready in $(( SECONDS - start ))s: $(IFS=,; echo "${steps[*]}" | sed 's/,/, /g') (binaries in $LAB_BIN)"
