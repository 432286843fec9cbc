#!/usr/bin/env bash
# check.sh - apply the gpuext patch series to a pristine NVIDIA open kernel
# modules tree (580.95.05), build it against the kernel lab's 6.12 headers and
# verify that the built modules reference the gpuext call sites.
# kmod/nvidia/check.sh --help explains the options and NV_HOST_COMPAT.
usage() {
	cat <<'USAGE'
usage: kmod/nvidia/check.sh NVIDIA_SRC_DIR   apply + build + verify
       kmod/nvidia/check.sh --dry-run        patch-format checks only (CI: no tree)
       kmod/nvidia/check.sh --verify-only    symbol checks on the modules already built in $WORK
       kmod/nvidia/check.sh --help

NVIDIA_SRC_DIR is a pristine open-gpu-kernel-modules 580.95.05 tree; it is
copied to $WORK and never modified.

Environment:
  MODULES          "nvidia-uvm" (default, about 2 min on 2 cores) or
                   "nvidia nvidia-uvm" (also the RM core and nvidia.ko; the
                   scheduling call sites; about 20 min of CPU time, so
                   about 10 min on 2 idle cores)
  NV_HOST_COMPAT=1 needed for nvidia.ko against the kernel lab's Debian
                   6.12.117+deb12 headers.  Those headers carry a 6.12.y
                   stable change that gave pci_resize_resource() a fourth
                   argument (exclude_bars); NVIDIA 580.95.05's
                   kernel-open/nvidia/nv-pci.c calls it with three and has no
                   conftest for it, so nv-pci.o fails to compile ("too few
                   arguments to function 'pci_resize_resource'") with or
                   without the series.  It is not a compiler mismatch: the
                   build uses the compiler named in the headers' .config
                   (x86_64-linux-gnu-gcc-12, Debian 12.2.0), the one the
                   kernel was built with.  With NV_HOST_COMPAT=1 check.sh
                   adds the argument (0) to that one call in its scratch copy
                   only; the series is unchanged.  nvidia-uvm.ko alone does not
                   need it.
  WORK             scratch copy (default /tmp/gpuext-nv-check); the build log
                   is $WORK.build.log
  KDIR             kernel headers (output tree); default: test/kernel/lab.sh's
                   cached Debian 6.12.117 headers.  SYSSRC/SYSOUT override the
                   split source/output trees.
  GPUEXT_INCLUDE   the gpuext call-site headers (default kmod/include)
  JOBS             parallel jobs (default 2); NICE (default "nice -n 19")
USAGE
}
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
log() { echo "[nv-check] $*"; }
die() { echo "[nv-check] FAIL: $*" >&2; exit 1; }

SRC="" DRY=0 VERIFY_ONLY=0
for a in "$@"; do case $a in --dry-run) DRY=1 ;; --verify-only) VERIFY_ONLY=1 ;; -h|--help) usage; exit 0 ;; -*) usage >&2; exit 2 ;; *) SRC=$a ;; esac; done
mapfile -t PATCHES < <(ls "$HERE"/[0-9][0-9][0-9][0-9]-*.patch)
[ ${#PATCHES[@]} -gt 0 ] || die "no patches in $HERE"

# Files the series may touch, and nothing else.
ALLOWED='^(kernel-open/Kbuild|kernel-open/common/inc/(nv-gpuext|os-interface)\.h|kernel-open/nvidia-uvm/uvm_(va_space\.[ch]|perf_prefetch\.c|pmm_gpu\.c|migrate\.[ch])|kernel-open/nvidia/os-interface\.c|src/nvidia/arch/nvalloc/unix/include/os-interface\.h|src/nvidia/generated/g_kernel_channel_group_nvoc\.h|src/nvidia/src/kernel/gpu/fifo/kernel_channel(_group(_api)?)?\.c)$'

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

WORK=${WORK:-/tmp/gpuext-nv-check}
MODULES=${MODULES:-nvidia-uvm}
if [ $VERIFY_ONLY = 1 ]; then
	log "verify only: the modules already built in $WORK"
else
[ -n "$SRC" ] && [ -f "$SRC/kernel-open/nvidia-uvm/uvm_pmm_gpu.c" ] || { usage >&2; die "no NVIDIA_SRC_DIR (a 580.95.05 open-gpu-kernel-modules tree)"; }
GPUEXT_INCLUDE=${GPUEXT_INCLUDE:-$REPO/kmod/include}
KDIR=${KDIR:-$("$REPO/test/kernel/lab.sh" fetch >&2 && cat "${KERNEL_LAB_CACHE:-$REPO/.cache/kernel}/kdir")}
log "pristine copy of $SRC -> $WORK"
rm -rf "$WORK" && mkdir -p "$WORK" && (cd "$SRC" && tar --exclude=.git -cf - .) | tar -xf - -C "$WORK"
for p in "${PATCHES[@]}"; do
	git -C "$WORK" apply --check "$p" || die "$(basename "$p") does not apply"
	git -C "$WORK" apply "$p"; log "applied $(basename "$p")"
done
# Debian splits the headers: linux-headers-*-amd64 (the output tree: .config,
# generated headers, Module.symvers) includes linux-headers-*-common (the
# source tree) by path.  NVIDIA's conftest needs both, as SYSSRC and SYSOUT;
# SYSSRC=<amd64 dir> alone misdetects kernel APIs (e.g. nv-time.h redefining
# ktime_get_raw_ts64, nv_stdarg.h not finding stdarg.h).
SYSOUT=${SYSOUT:-$KDIR}
SYSSRC=${SYSSRC:-$(sed -n 's|^include \(/.*\)/Makefile$|\1|p' "$SYSOUT/Makefile" | head -n1)}
SYSSRC=${SYSSRC:-$SYSOUT}
[ -f "$SYSSRC/Makefile" ] && [ -f "$SYSOUT/.config" ] || die "bad headers: SYSSRC=$SYSSRC SYSOUT=$SYSOUT"
JOBS=${JOBS:-2}
# NVIDIA 580.95.05's nv-pci.c calls pci_resize_resource() with 3 arguments;
# Debian's 6.12.117 (a 6.12.y stable change) takes 4 (exclude_bars), so
# nvidia.ko's nv-pci.o does not compile against the kernel lab's headers,
# with or without the series (a header API change, not the compiler: see
# --help).  NV_HOST_COMPAT=1 edits that one call in the scratch copy (never
# in the series) so the rest of nvidia.ko can be built and checked.
if [ "${NV_HOST_COMPAT:-0}" = 1 ] && grep -q 'pci_resize_resource(struct pci_dev \*dev, int i, int size,$' "$SYSSRC/include/linux/pci.h"; then
	sed -i 's/pci_resize_resource(pci_dev, NV_GPU_BAR1, requested_size)/pci_resize_resource(pci_dev, NV_GPU_BAR1, requested_size, 0)/' "$WORK/kernel-open/nvidia/nv-pci.c"
	log "NV_HOST_COMPAT=1: edited NVIDIA's kernel-open/nvidia/nv-pci.c in $WORK (pci_resize_resource(..., 0)); NOT part of the series"
fi
log "building $MODULES against SYSSRC=$SYSSRC SYSOUT=$SYSOUT (GPUEXT_INCLUDE=$GPUEXT_INCLUDE, -j$JOBS)"
t0=$SECONDS
BUILDLOG=$WORK.build.log
# Progress: every 25th compiled object (kbuild's "  CC [M]  x.o" and the RM
# and modeset cores' " [ nvidia ]  CC  x.c"), with a running count and the
# elapsed time; errors and warnings in full.
progress() { awk -v t0="$(date +%s)" '
	/^  (CC|LD|AR|MODPOST|CC \[M\]|LD \[M\]) |^ \[ [a-z-]+ *\] +(CC|CXX|LD|AR) / { n++; if (n % 25 == 0) { printf "[nv-check] %d objects, %d s: %s\n", n, systime() - t0, $NF; fflush() } }
	/error:|\*\*\*/ { print; fflush(); next }
	/warning:/ && $0 ~ touched { print; fflush(); next }
	/warning:/ { w++ }
	END { if (w) printf "[nv-check] %d compiler warnings in files the series does not touch (see the full log)\n", w }' touched="$TOUCHED"; }
# Warnings are printed for the files the series touches only (NVIDIA's own
# code gives thousands with this compiler).
TOUCHED=$(cat "${PATCHES[@]}" | sed -n 's|^diff --git a/\(.*\) b/.*|\1|p' | sed 's|^src/nvidia/||' | sort -u | sed 's/[.]/[.]/g' | paste -sd'|')
# nvidia-uvm alone: NVIDIA's common headers (nv-time.h, nv-mm.h, ...) rely on
# conftest results that only nvidia/nvidia.Kbuild asks for, so kbuild is run
# directly with NV_KERNEL_MODULES including nvidia (conftest + Kbuild) and asked
# for the .ko targets only: nvidia.ko itself needs nv-kernel.o_binary, the RM
# core built by the top-level Makefile (src/nvidia, long).  Without nvidia.ko's
# Module.symvers, modpost only warns about nvidia-uvm.ko's nvUvmInterface*
# imports (KBUILD_MODPOST_WARN=1).
CC_KERNEL=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\) .*/\1/p' "$SYSOUT/.config")
command -v "$CC_KERNEL" >/dev/null 2>&1 || CC_KERNEL=${CC:-cc}
case " $MODULES " in
*" nvidia "*)
	log "nvidia.ko requested: building the RM core (src/nvidia, nv-kernel.o) first - long on 2 cores"
	build=(make -C "$WORK" modules -j"$JOBS" CC="$CC_KERNEL" SYSSRC="$SYSSRC" SYSOUT="$SYSOUT"
		NV_KERNEL_MODULES="$MODULES" GPUEXT_INCLUDE="$GPUEXT_INCLUDE") ;;
*)
	kos=(); for m in $MODULES; do kos+=("$m.ko"); done
	build=(make -C "$SYSSRC" KBUILD_OUTPUT="$SYSOUT" M="$WORK/kernel-open" ARCH=x86_64 CC="$CC_KERNEL" -j"$JOBS"
		NV_KERNEL_SOURCES="$SYSSRC" NV_KERNEL_OUTPUT="$SYSOUT" NV_KERNEL_MODULES="nvidia $MODULES"
		GPUEXT_INCLUDE="$GPUEXT_INCLUDE" KBUILD_MODPOST_WARN=1 "${kos[@]}") ;;
esac
set +o pipefail
${NICE:-nice -n 19} "${build[@]}" >"$BUILDLOG" 2>&1 &
bpid=$!
tail -n +1 -F --pid=$bpid "$BUILDLOG" 2>/dev/null | progress
wait $bpid && brc=0 || brc=$?
set -o pipefail
log "make exited $brc after $((SECONDS - t0)) s (full log: $BUILDLOG)"
for m in $MODULES; do
	[ -f "$WORK/kernel-open/$m.ko" ] && continue
	grep -E 'error:|\*\*\*' "$BUILDLOG" | head -n 20 >&2
	grep -q "too few arguments to function .pci_resize_resource" "$BUILDLOG" &&
		log "nvidia.ko: known upstream 580.95.05 / 6.12.y incompatibility in NVIDIA's nv-pci.c, not in the series (NV_HOST_COMPAT=1 works around it in the scratch copy)"
	[ -f "$WORK/src/nvidia/_out/Linux_x86_64/nv-kernel.o" ] && log "RM core nv-kernel.o was built"
	die "$m.ko not built"
done
log "built in $((SECONDS - t0)) s: $(cd "$WORK/kernel-open" && ls -1 $(printf '%s.ko ' $MODULES) | tr '\n' ' ')"
fi # VERIFY_ONLY

# String literals only (not debug info, which names the prototypes too).
rodata_strings() { readelf -W -p .rodata.str1.1 -p .rodata.str1.8 "$1" 2>/dev/null | sed -n 's/^ *\[ *[0-9a-f]*\]  *//p'; }
# A symbol_get()'d call site: its name is a string literal passed to
# __symbol_get, and the module has no link-time reference to it (which would
# make gpuext.ko a hard dependency).
verify() { # module.ko symbol...
	local ko=$WORK/kernel-open/$1 m=$1 s; shift
	local strs syms
	strs=$(rodata_strings "$ko"); syms=$(nm "$ko")
	grep -q ' U __symbol_get$' <<<"$syms" || die "$m does not import __symbol_get"
	grep -q ' U __symbol_put$' <<<"$syms" || die "$m does not import __symbol_put"
	for s in "$@"; do
		grep -qx "$s" <<<"$strs" || die "$m has no symbol_get(\"$s\") string"
		! grep -q " [Uw] $s\$" <<<"$syms" || die "$m links against $s (hard dependency on gpuext.ko)"
		log "$m: symbol_get($s)"
	done
	# (grep on variables, not pipes: grep -q exiting early + pipefail = SIGPIPE failures)
	local modinfo; modinfo=$(readelf -W -p .modinfo "$ko")
	! grep -q 'depends=.*gpuext' <<<"$modinfo" || die "$m depends on gpuext"
	log "$m: imports __symbol_get/__symbol_put, no link-time dependency on gpuext.ko"
}
UVM_SYMS=(gpuext_ctx_create gpuext_ctx_destroy gpuext_prefetch gpuext_prefetch_node gpuext_evict_prepare gpuext_block_activate gpuext_block_access gpuext_ctx_set_migrate)
TSG_SYMS=(gpuext_tsg_init gpuext_tsg_bind gpuext_tsg_destroy gpuext_tsg_submit)
case " $MODULES " in *" nvidia-uvm "*)
	verify nvidia-uvm.ko "${UVM_SYMS[@]}"
	# The eviction hook runs outside pmm->list_lock inside g_uvm_gpuext_srcu
	# (patches 2 and 4); stock nvidia-uvm.ko uses no SRCU.
	uvmsyms=$(nm "$WORK/kernel-open/nvidia-uvm.ko")
	for s in __srcu_read_lock __srcu_read_unlock synchronize_srcu; do
		grep -q " U $s\$" <<<"$uvmsyms" || die "nvidia-uvm.ko does not import $s (eviction hook SRCU)"
	done
	grep -q " [DdBb] g_uvm_gpuext_srcu\$" <<<"$uvmsyms" || die "nvidia-uvm.ko has no g_uvm_gpuext_srcu"
	log "nvidia-uvm.ko: g_uvm_gpuext_srcu defined, imports __srcu_read_lock/__srcu_read_unlock/synchronize_srcu"
	# Proactive migration (patch 7): every VA space registers
	# uvm_gpuext_migrate_entry (UVM_ENTRY_RET around the migration through
	# uvm_migrate(), the UVM_MIGRATE path) with its context from
	# uvm_va_space_create().
	grep -q " T uvm_gpuext_migrate_register\$" <<<"$uvmsyms" || die "nvidia-uvm.ko does not define uvm_gpuext_migrate_register"
	grep -q " t uvm_gpuext_migrate_entry\$" <<<"$uvmsyms" || die "nvidia-uvm.ko has no uvm_gpuext_migrate_entry (the migrate entry point)"
	uvmrel=$(readelf -W -r "$WORK/kernel-open/nvidia-uvm.ko" | awk '$5 == "uvm_gpuext_migrate_register" {n++} END {print n+0}')
	[ "$uvmrel" -ge 1 ] || die "nvidia-uvm.ko: nothing calls uvm_gpuext_migrate_register"
	log "nvidia-uvm.ko: uvm_gpuext_migrate_entry defined, uvm_gpuext_migrate_register called ($uvmrel relocation(s))" ;;
esac
case " $MODULES " in *" nvidia "*)
	verify nvidia.ko gpuext_ctx_create gpuext_ctx_destroy "${TSG_SYMS[@]}"
	nvsyms=$(nm "$WORK/kernel-open/nvidia.ko")
	for s in os_gpuext_tsg_init os_gpuext_tsg_bind os_gpuext_tsg_destroy os_gpuext_tsg_set_handles os_gpuext_tsg_drop_handles os_gpuext_tsg_submit; do
		grep -q " T $s\$" <<<"$nvsyms" || die "nvidia.ko does not define $s"
	done
	# Call sites in the RM core: kchangrpInit (init, destroy on failure),
	# kchangrpDestroy (destroy), GPFIFO_SCHEDULE of a TSG and of a channel
	# (bind).
	relocs=$(readelf -W -r "$WORK/kernel-open/nvidia.ko" | awk '$5 ~ /^os_gpuext_tsg_/ {print $5}' | sort | uniq -c | tr -s ' ' | tr '\n' ',')
	for s in os_gpuext_tsg_init os_gpuext_tsg_bind os_gpuext_tsg_destroy os_gpuext_tsg_set_handles os_gpuext_tsg_drop_handles os_gpuext_tsg_submit; do
		grep -q " $s," <<<"$relocs" || die "nvidia.ko: no call to $s"
	done
	log "nvidia.ko: os_gpuext_tsg_* defined, calls (relocations) from the RM core:$relocs"
	# Per RM object (the RM core's own build output, linked into nvidia.ko
	# as nv-kernel.o): which file calls what.  The policy's timeslice and
	# interleave level are applied in kchangrpapiConstruct() with the stock
	# controls NVA06C_CTRL_CMD_SET_TIMESLICE (0xa06c0103) and
	# NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL (0xa06c0107), which the stock
	# kernel_channel_group_api.o never issues itself (it only serves them).
	rmout=$WORK/src/nvidia/_out/Linux_x86_64
	# Patch 8: the preemption handle is recorded at construct and dropped at
	# destruct; tsg_submit runs after a schedule of the TSG and of a channel.
	for pair in kernel_channel_group.o:os_gpuext_tsg_init kernel_channel_group.o:os_gpuext_tsg_destroy \
		kernel_channel_group_api.o:os_gpuext_tsg_bind kernel_channel.o:os_gpuext_tsg_bind \
		kernel_channel_group_api.o:os_gpuext_tsg_set_handles kernel_channel_group_api.o:os_gpuext_tsg_drop_handles \
		kernel_channel_group_api.o:os_gpuext_tsg_submit \
		kernel_channel.o:kchangrpGpuextSubmit; do
		o=${pair%%:*} s=${pair#*:}
		[ -f "$rmout/$o" ] || die "RM object $o not found in $rmout"
		r=$(readelf -W -r "$rmout/$o")
		awk -v s="$s" '$5 == s {n++} END {exit !n}' <<<"$r" || die "$o: no call to $s"
		log "RM core $o: calls $s"
	done
	dis=$(objdump -d --no-show-raw-insn "$rmout/kernel_channel_group_api.o")
	# ... and NVA06C_CTRL_CMD_PREEMPT (0xa06c0105) on the TSGs a policy
	# preempts (patch 8), which the stock object never issues either.
	for c in 0xa06c0103:SET_TIMESLICE:"on the new TSG" 0xa06c0107:SET_INTERLEAVE_LEVEL:"on the new TSG" \
		0xa06c0105:PREEMPT:"on the TSGs a policy preempts"; do
		IFS=: read -r code name what <<<"$c"
		grep -qF "\$$code," <<<"$dis" || die "kernel_channel_group_api.o does not issue NVA06C_CTRL_CMD_$name"
		log "RM core kernel_channel_group_api.o: issues NVA06C_CTRL_CMD_$name ($code) $what"
	done ;;
*)	log "nvidia.ko not built (MODULES=\"$MODULES\"; MODULES=\"nvidia nvidia-uvm\" builds the RM core too): scheduling call sites NOT verified" ;;
esac
log "PASS ($MODULES)"
