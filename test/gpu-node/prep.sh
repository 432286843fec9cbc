#!/usr/bin/env bash
# prep.sh (make gpu-node-prep): here, on a machine with Go and apt, build what
# `make gpu-node` needs on the GPU machine, which has neither and can pull
# nothing, into out/gpu-node (carry it: about 40 MiB):
#   bin.tar.xz   containerd, containerd-shim-runc-v2, ctr, crictl (the lab's,
#                test/lab/install-deps.sh), nvidia-ctk and nvidia-cdi-hook
#                (NVIDIA's toolkit, built from its Go module at the version
#                below), gpuext-nri-plugin, gpuextctl, gpuext-oci-hook,
#                gpuext-gpuview (make build); stripped and compressed
#   runc_*.deb   Debian's runc (unpacked there with dpkg -x)
#   images/      the lab's images (test/lab/image.sh): pause, busybox, hostfs
# Needs: make deps build first (the Makefile target does it).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
OUTD="$REPO/out/gpu-node"
NVCTK_VERSION=${GPUEXT_NVCTK_VERSION:-v1.20.2}
NVCTK_BIN="$REPO/.cache/nvidia-ctk-$NVCTK_VERSION"
LAB_BIN="${GPUEXT_LAB_BIN:-$REPO/.cache/bin}"
log() { printf '[gpu-node-prep] %s\n' "$*"; }

rm -rf "$OUTD" && mkdir -p "$OUTD/images"
if [[ ! -x $NVCTK_BIN/nvidia-ctk || ! -x $NVCTK_BIN/nvidia-cdi-hook ]]; then
	log "building nvidia-ctk and nvidia-cdi-hook $NVCTK_VERSION from NVIDIA's Go module (~2 min, cached in .cache)"
	mkdir -p "$NVCTK_BIN"
	(cd "$NVCTK_BIN" && GOFLAGS='' GOBIN="$NVCTK_BIN" go install -trimpath -ldflags '-s -w' \
		"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$NVCTK_VERSION" \
		"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$NVCTK_VERSION")
fi
log "images (test/lab/image.sh)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GPUEXT_LAB_DIR="$tmp/lab" bash "$REPO/test/lab/image.sh" >/dev/null 2>&1
cp "$tmp/lab/images/"{pause,busybox,hostfs}-oci.tar "$OUTD/images/"
log "runc from Debian (apt-get download)"
(cd "$OUTD" && apt-get download -qq runc >/dev/null 2>&1) || { apt-get update -qq && (cd "$OUTD" && apt-get download -qq runc); }
log "binaries: strip, xz"
mkdir -p "$tmp/bin"
for b in containerd containerd-shim-runc-v2 ctr crictl; do cp "$LAB_BIN/$b" "$tmp/bin/"; done
cp "$NVCTK_BIN/nvidia-ctk" "$NVCTK_BIN/nvidia-cdi-hook" "$tmp/bin/"
for b in gpuext-nri-plugin gpuextctl gpuext-oci-hook gpuext-gpuview; do cp "$REPO/bin/$b" "$tmp/bin/"; done
strip "$tmp/bin/"* 2>/dev/null || true
tar -C "$tmp/bin" -cf - . | xz -T0 -6 >"$OUTD/bin.tar.xz"
du -sh "$OUTD" "$OUTD"/* | sed 's/^/[gpu-node-prep] /'
