#!/usr/bin/env bash
# check.sh - apply the gpuext patch series to a pristine NVIDIA open kernel
# modules tree (580.95.05), build it against the kernel lab's 6.12 headers and
# verify that nvidia-uvm.ko references the gpuext call sites.
#
#   kmod/nvidia/check.sh NVIDIA_SRC_DIR   apply + build + verify
#   kmod/nvidia/check.sh --dry-run        patch-format checks only (CI: no tree)
#
# WORK (default /tmp/gpuext-nv-check) holds the patched copy; GPUEXT_INCLUDE
# (default kmod/include) is the header gpusim.ko compiles; KDIR defaults to
# test/kernel/lab.sh's cached headers.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
log() { echo "[nv-check] $*"; }
die() { echo "[nv-check] FAIL: $*" >&2; exit 1; }

SRC="" DRY=0
for a in "$@"; do case $a in --dry-run) DRY=1 ;; *) SRC=$a ;; esac; done
mapfile -t PATCHES < <(ls "$HERE"/[0-9][0-9][0-9][0-9]-*.patch)
[ ${#PATCHES[@]} -gt 0 ] || die "no patches in $HERE"

# Files the series may touch, and nothing else.
ALLOWED='^(kernel-open/Kbuild|kernel-open/common/inc/nv-gpuext\.h|kernel-open/nvidia-uvm/uvm_(va_space\.[ch]|perf_prefetch\.c|pmm_gpu\.c))$'

for p in "${PATCHES[@]}"; do
	n=$(basename "$p")
	grep -q '^From [0-9a-f]\{40\} ' "$p" || die "$n: no From line"
	grep -q '^Subject: \[PATCH' "$p" || die "$n: no Subject"
	body=$(awk '/^Subject:/{s=1;next} s&&/^---$/{exit} s' "$p" | grep -cv '^\s*$' || true)
	[ "$body" -ge 3 ] || die "$n: description too short ($body lines)"
	while read -r f; do
		[[ $f =~ $ALLOWED ]] || die "$n touches unexpected file $f"
	done < <(sed -n 's|^diff --git a/\(.*\) b/.*|\1|p' "$p")
	log "format ok: $n"
done
[ $DRY = 1 ] && { log "dry run: ${#PATCHES[@]} patches well-formed (nothing applied or built)"; exit 0; }

[ -n "$SRC" ] && [ -f "$SRC/kernel-open/nvidia-uvm/uvm_pmm_gpu.c" ] || die "usage: $0 NVIDIA_SRC_DIR [--dry-run]"
WORK=${WORK:-/tmp/gpuext-nv-check}
GPUEXT_INCLUDE=${GPUEXT_INCLUDE:-$REPO/kmod/include}
KDIR=${KDIR:-$("$REPO/test/kernel/lab.sh" fetch >&2 && cat "${KERNEL_LAB_CACHE:-$REPO/.cache/kernel}/kdir")}
log "pristine copy of $SRC -> $WORK"
rm -rf "$WORK" && mkdir -p "$WORK" && (cd "$SRC" && tar --exclude=.git -cf - .) | tar -xf - -C "$WORK"
for p in "${PATCHES[@]}"; do
	git -C "$WORK" apply --check "$p" || die "$(basename "$p") does not apply"
	git -C "$WORK" apply "$p"; log "applied $(basename "$p")"
done
log "building kernel-open against $KDIR (GPUEXT_INCLUDE=$GPUEXT_INCLUDE)"
t0=$SECONDS
make -C "$WORK" modules -j"${JOBS:-2}" SYSSRC="$KDIR" GPUEXT_INCLUDE="$GPUEXT_INCLUDE" 2>&1 |
	while IFS= read -r l; do echo "$l"; done | awk '{print; fflush()}' || true
[ -f "$WORK/kernel-open/nvidia-uvm.ko" ] || die "build failed after $((SECONDS - t0)) s"
log "built in $((SECONDS - t0)) s"
for s in gpuext_ctx_create gpuext_ctx_destroy gpuext_prefetch gpuext_evict_prepare gpuext_block_activate gpuext_block_access; do
	strings "$WORK/kernel-open/nvidia-uvm.ko" | grep -qx "$s" || die "nvidia-uvm.ko does not reference $s"
	log "nvidia-uvm.ko references $s (symbol_get)"
done
nm "$WORK/kernel-open/nvidia-uvm.ko" | grep -q ' U __symbol_get$' || die "nvidia-uvm.ko does not import __symbol_get"
log "PASS"
