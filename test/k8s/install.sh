#!/usr/bin/env bash
# install.sh: build the k8s lab's Kubernetes tools into .cache/k8s/bin. Idempotent.
#
#   test/k8s/install.sh            build when the stamp is stale, else say they are there
#   test/k8s/install.sh --force    rebuild
#
# From the module in test/k8s/tools (its own go.mod and go.sum, never a
# dependency of gpuext):
#   gpuext-kube   one binary with etcd v3.7.3 and kube-apiserver,
#                 kube-controller-manager, kube-scheduler, kubelet and kubectl of
#                 k8s.io/kubernetes v1.37.2; one symlink per component
#                 (`kubelet --version` runs the kubelet)
#   helm          helm.sh/helm/v3 v3.22.0
# The stamp $K8S_BIN/.gpuext-k8s-stamp holds the hash of the tools module
# (go.mod, go.sum, main.go) and the Go version: any change rebuilds.
# Cold (empty Go build cache): ~1000 s of CPU, 10-12 min on 2 idle cores (see
# test/k8s/README.md); a warm rebuild (stamp changed, cache kept) only links.
#
# Env: GPUEXT_K8S_BIN (default $REPO/.cache/k8s/bin), GPUEXT_K8S_GOCACHE (a
# build cache of its own; default: the go command's), GPUEXT_LAB_SKIP_APT=1.
set -euo pipefail

K8S_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$K8S_SCRIPTS/../.." && pwd -P)"
K8S_BIN="${GPUEXT_K8S_BIN:-$REPO/.cache/k8s/bin}"
TOOLS="$K8S_SCRIPTS/tools"
STAMP="$K8S_BIN/.gpuext-k8s-stamp"
K8S_VERSION="v1.37.2"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { printf '[k8s] %s\n' "$*" >&2; }
die() { printf '[k8s] ERROR: %s\n' "$*" >&2; exit 1; }

# The cluster script needs openssl (PKI) and curl (health checks).
install_apt() {
	local missing=() p
	for p in openssl curl; do
		command -v "$p" >/dev/null || missing+=("$p")
	done
	(( ${#missing[@]} == 0 )) && return
	[[ "$(id -u)" == 0 ]] || die "missing ${missing[*]}; install them as root"
	log "installing apt packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

stamp_line() {
	printf '%s %s %s\n' "$K8S_VERSION" "$(go env GOVERSION)" \
		"$(cat "$TOOLS/go.mod" "$TOOLS/go.sum" "$TOOLS/main.go" | sha256sum | cut -c1-16)"
}

# helm_version: the helm.sh/helm/v3 version the tools module requires.
helm_version() { awk '$1 == "helm.sh/helm/v3" { print $2 }' "$TOOLS/go.mod"; }

up_to_date() {
	[[ -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_line)" ]] || return 1
	local b
	for b in gpuext-kube helm "${COMPONENTS[@]}"; do
		[[ -x "$K8S_BIN/$b" ]] || return 1
	done
}

build() {
	command -v go >/dev/null || die "go toolchain not found in PATH"
	mkdir -p "$K8S_BIN"
	local start=$SECONDS ldflags
	# Without the -X the components report v0.0.0-master, and the kubelet's
	# version skew checks against the apiserver would compare nonsense.
	ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
	ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
	ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
	local env=(GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off)
	[[ -n "${GPUEXT_K8S_GOCACHE:-}" ]] && env+=("GOCACHE=$GPUEXT_K8S_GOCACHE")
	log "building etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl $K8S_VERSION (one binary; cached after the first run)"
	(cd "$TOOLS" && env "${env[@]}" go build -trimpath -ldflags "$ldflags" -o "$K8S_BIN/gpuext-kube.new" .)
	mv "$K8S_BIN/gpuext-kube.new" "$K8S_BIN/gpuext-kube"
	log "gpuext-kube built in $(( SECONDS - start ))s"
	local t=$SECONDS
	log "building helm (helm.sh/helm/v3, the version in test/k8s/tools/go.mod)"
	(cd "$TOOLS" && env "${env[@]}" go build -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$(helm_version) -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
		-o "$K8S_BIN/helm.new" helm.sh/helm/v3/cmd/helm)
	mv "$K8S_BIN/helm.new" "$K8S_BIN/helm"
	log "helm built in $(( SECONDS - t ))s"
	local c
	for c in "${COMPONENTS[@]}"; do
		ln -sfn gpuext-kube "$K8S_BIN/$c"
	done
	stamp_line > "$STAMP"
	log "k8s tools built in $(( SECONDS - start ))s into $K8S_BIN"
}

if [[ "${GPUEXT_LAB_SKIP_APT:-0}" != 1 ]]; then
	install_apt
fi
if [[ "${1:-}" != --force ]] && up_to_date; then
	log "k8s tools $K8S_VERSION present in $K8S_BIN"
	exit 0
fi
build
