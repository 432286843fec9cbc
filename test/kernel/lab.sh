#!/usr/bin/env bash
# lab.sh - the gpuext kernel lab: boot Debian's 6.12 kernel in qemu with our
# modules (kmod/) and run the guest tests (test/kernel/guest) inside it.
#
#   test/kernel/lab.sh fetch   download + unpack kernel image and headers (cached)
#   test/kernel/lab.sh build   build gpuext.ko, gpusim.ko and the static guest test binary
#   test/kernel/lab.sh run     pack an initramfs, boot qemu, print the guest's go test -v output
#   test/kernel/lab.sh all     fetch + build + run
#   test/kernel/lab.sh bench   fetch + build, boot with the trace-replay benchmark
#                              (TestBenchmarkTraces, TestBenchmarkMixes) and write their BENCH lines
#                              to bench/kernel-sim.txt (SIMULATED figures)
#
# KERNEL_LAB_SERIES=7.x boots a 7.x kernel instead, for what 6.12 lacks (the
# cgroup dmem controller of 6.14+), and runs only the guest tests that need it
# (TestDmemKernel*; the 6.12 run skips them).  Debian's 7.x kernels
# (trixie-backports 7.3, sid 7.2) are built without the controller
# (CONFIG_CGROUP_DMEM unset, seen 2026-12-06), so this series takes Ubuntu
# 24.04's HWE kernel (7.0, CONFIG_CGROUP_DMEM=y) and its headers: fetch_7x
# says how they are fetched, verified and made to build here.
#
# Everything is cached under $REPO/.cache/kernel (7.x: .cache/kernel-7.x).
# Exit status is non-zero when any guest test fails or the guest never reports.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KSERIES=${KERNEL_LAB_SERIES:-6.12}
case "$KSERIES" in
6.12) CACHE=${KERNEL_LAB_CACHE:-$REPO/.cache/kernel} ;;
7.x) CACHE=${KERNEL_LAB_CACHE:-$REPO/.cache/kernel-7.x} ;;
*) echo "[kernel-lab] ERROR: KERNEL_LAB_SERIES=$KSERIES: want 6.12 or 7.x" >&2; exit 1 ;;
esac
TIMEOUT=${KERNEL_LAB_TIMEOUT:-240}
ROOT=$CACHE/root
OUT=${KERNEL_LAB_OUT:-$CACHE/out} # the build and the boot's files (KERNEL_LAB_OUT: another, for a run beside another)

log() { echo "[kernel-lab] $*"; }
die() { echo "[kernel-lab] ERROR: $*" >&2; exit 1; }

need_tools() {
	local missing=()
	command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
	command -v cpio >/dev/null || missing+=(cpio)
	command -v pahole >/dev/null || missing+=(pahole)
	command -v bc >/dev/null || missing+=(bc)
	command -v zstd >/dev/null || missing+=(zstd) # the 7.x kernel image is zstd-compressed
	command -v file >/dev/null || missing+=(file)
	command -v objcopy >/dev/null || missing+=(binutils)
	command -v make >/dev/null || missing+=(make)
	command -v clang >/dev/null || missing+=(clang llvm)
	[ -f /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
	[ -f /usr/include/libelf.h ] || missing+=(libelf-dev)
	if ! busybox_static >/dev/null; then missing+=(busybox-static); fi
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		apt_update_once
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

busybox_static() {
	local b
	for b in /bin/busybox /usr/bin/busybox; do
		if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then echo "$b"; return 0; fi
	done
	return 1
}

APT_UPDATED=0
apt_update_once() {
	[ "$APT_UPDATED" = 1 ] && return 0
	log "apt-get update"
	apt-get update -qq >/dev/null
	APT_UPDATED=1
}

abi_name() {
	local abi
	abi=$(apt-cache depends "linux-headers-$KSERIES-amd64" 2>/dev/null | sed -n 's/^ *Depends: linux-headers-\(.*\)-amd64$/\1/p' | head -1)
	if [ -z "$abi" ]; then
		apt_update_once
		abi=$(apt-cache depends "linux-headers-$KSERIES-amd64" 2>/dev/null | sed -n 's/^ *Depends: linux-headers-\(.*\)-amd64$/\1/p' | head -1)
	fi
	[ -n "$abi" ] || die "cannot resolve the $KSERIES ABI from linux-headers-$KSERIES-amd64 (is bookworm-security in apt sources?)"
	echo "$abi"
}

kdir() { cat "$CACHE/kdir"; }

cmd_fetch() {
	need_tools
	if [ -f "$CACHE/fetch.stamp" ] && [ -d "$(kdir)" ] && [ -f "$CACHE/vmlinuz" ]; then
		log "kernel $(cat "$CACHE/abi") cached in $CACHE"
		return 0
	fi
	if [ "$KSERIES" = 7.x ]; then
		fetch_7x
		return
	fi
	local abi t0=$SECONDS
	abi=$(abi_name)
	log "fetching kernel $abi"
	mkdir -p "$CACHE/debs" "$ROOT"
	(cd "$CACHE/debs" && apt-get download -qq \
		"linux-image-$abi-amd64-unsigned" "linux-headers-$abi-amd64" \
		"linux-headers-$abi-common" "linux-kbuild-$abi" >/dev/null) ||
		die "apt-get download failed"
	local d
	for d in "$CACHE"/debs/*"$abi"*.deb; do dpkg -x "$d" "$ROOT"; done
	local kd=$ROOT/usr/src/linux-headers-$abi-amd64
	[ -f "$kd/Makefile" ] || die "no headers Makefile in $kd"
	# The arch headers Makefile includes the -common tree by absolute path.
	sed -i "s|^include /usr/src/|include $ROOT/usr/src/|" "$kd/Makefile"
	# Headers ship symlinks into /usr/lib/linux-kbuild-*: point them into the unpack dir.
	local l tgt
	while IFS= read -r l; do
		tgt=$(readlink "$l")
		case "$tgt" in /usr/*) ln -sfn "$ROOT$tgt" "$l" ;; esac
	done < <(find "$ROOT/usr/src" -type l)
	cp "$ROOT/boot/vmlinuz-$abi-amd64" "$CACHE/vmlinuz"
	echo "$abi" >"$CACHE/abi"
	echo "$kd" >"$CACHE/kdir"
	touch "$CACHE/fetch.stamp"
	log "fetched kernel $abi in $((SECONDS - t0))s"
}

# private_apt SOURCES_LINE... : an apt configuration of its own under
# $CACHE/apt (sources, lists, cache; no installed packages), so that suites
# the machine's apt does not use are read without touching its config.
# Prints the apt options that select it.
private_apt() {
	local d=$CACHE/apt
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
	printf '%s\n' "$@" >"$d/sources.list"
	echo "-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache -o Dir::State::status=/dev/null -o APT::Sandbox::User=root"
}

# ubuntu_mirror: KERNEL_LAB_UBUNTU_MIRROR, else the default mirror Debian's
# debootstrap knows for current Ubuntu suites on amd64.
ubuntu_mirror() {
	if [ -n "${KERNEL_LAB_UBUNTU_MIRROR:-}" ]; then
		echo "$KERNEL_LAB_UBUNTU_MIRROR"
		return
	fi
	local t m
	t=$(mktemp -d)
	(cd "$t" && apt-get download -qq debootstrap >/dev/null 2>&1 && dpkg -x debootstrap_*.deb x) || { rm -rf "$t"; die "cannot read debootstrap's Ubuntu mirror: set KERNEL_LAB_UBUNTU_MIRROR"; }
	# the amd64 case of its Ubuntu script: old-releases first, then the current suites' mirror
	m=$(sed -n '/amd64|i386)/,/^\t;;$/p' "$t/x/usr/share/debootstrap/scripts/gutsy" | sed -n 's/^[[:space:]]*default_mirror //p' | tail -1)
	rm -rf "$t"
	[ -n "$m" ] || die "no Ubuntu mirror in debootstrap's script: set KERNEL_LAB_UBUNTU_MIRROR"
	echo "$m"
}

# fetch_7x: Ubuntu noble's HWE kernel (linux-image-unsigned, headers) and
# what its headers' tools need.  The archive key comes from Debian's own
# ubuntu-keyring package (sid, read from the Debian mirror this machine's apt
# uses), so every download is verified.  The headers' tools (modpost,
# objtool, resolve_btfids, gendwarfksyms...) are built for noble's glibc
# 2.39: each is wrapped to run under noble's own loader and libraries,
# unpacked beside them.  The headers ship no vmlinux: its BTF (module BTF is
# built against it) is cut out of the kernel image.  Modules are built with
# this machine's gcc and noble's pahole (the config asks for its version).
fetch_7x() {
	local t0=$SECONDS debian a u abi hwe kd l f
	debian=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 2>/dev/null | grep -m1 '/debian/$') ||
		die "no Debian mirror in this machine's apt sources"
	mkdir -p "$CACHE/debs" "$ROOT"
	a=$(private_apt "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $debian sid main")
	# shellcheck disable=SC2086
	apt-get $a update -qq >/dev/null || die "apt-get update of Debian sid failed"
	# shellcheck disable=SC2086
	(cd "$CACHE/debs" && apt-get $a download -qq ubuntu-keyring >/dev/null) || die "download of ubuntu-keyring failed"
	dpkg -x "$CACHE"/debs/ubuntu-keyring_*.deb "$CACHE/keyring"
	u=$(ubuntu_mirror)
	local key=$CACHE/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg
	[ -f "$key" ] || die "no ubuntu-archive-keyring.gpg in ubuntu-keyring"
	a=$(private_apt "deb [signed-by=$key] $u noble main universe" "deb [signed-by=$key] $u noble-updates main")
	# shellcheck disable=SC2086
	apt-get $a update -qq >/dev/null || die "apt-get update of Ubuntu noble failed"
	# shellcheck disable=SC2086
	abi=$(apt-cache $a depends linux-headers-generic-hwe-24.04 2>/dev/null | sed -n 's/^ *Depends: linux-headers-\(.*\)-generic$/\1/p' | head -1)
	[ -n "$abi" ] || die "cannot resolve the HWE kernel from linux-headers-generic-hwe-24.04"
	# shellcheck disable=SC2086
	hwe=$(apt-cache $a depends "linux-headers-$abi-generic" 2>/dev/null | sed -n 's/^ *Depends: \(linux-hwe-.*-headers-.*\)$/\1/p' | head -1)
	[ -n "$hwe" ] || die "no common headers package for linux-headers-$abi-generic"
	log "fetching Ubuntu kernel $abi-generic"
	# shellcheck disable=SC2086
	(cd "$CACHE/debs" && apt-get $a download -qq "linux-image-unsigned-$abi-generic" "linux-headers-$abi-generic" "$hwe" \
		libc6 libelf1t64 libdw1t64 zlib1g libzstd1 liblzma5 libbz2-1.0 libbpf1 pahole >/dev/null) || die "apt-get download failed"
	for f in "$CACHE"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
	kd=$ROOT/usr/src/linux-headers-$abi-generic
	l=$ROOT/usr/lib/x86_64-linux-gnu
	[ -f "$kd/Makefile" ] && [ -x "$l/ld-linux-x86-64.so.2" ] || die "unpacked headers or loader missing under $ROOT"
	while IFS= read -r f; do
		[ -e "$f.real" ] && continue # reached twice through links: wrapped once
		file -b "$f" | grep -q '^ELF .*executable' || continue
		mv "$f" "$f.real"
		printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$l/ld-linux-x86-64.so.2" "$l" "$f.real" >"$f"
		chmod +x "$f"
	done < <(find -L "$kd" -type f -perm -u+x ! -name '*.real' ! -name '*.sh' ! -name '*.py' ! -name '*.pl')
	printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$l/ld-linux-x86-64.so.2" "$l" "$ROOT/usr/bin/pahole" >"$CACHE/pahole"
	chmod +x "$CACHE/pahole"
	sh "$kd/scripts/extract-vmlinux" "$ROOT/boot/vmlinuz-$abi-generic" >"$CACHE/vmlinux.full" || die "extract-vmlinux failed"
	objcopy --only-section=.BTF "$CACHE/vmlinux.full" "$kd/vmlinux" 2>/dev/null || die "no .BTF in the kernel image"
	rm -f "$CACHE/vmlinux.full"
	cp "$ROOT/boot/vmlinuz-$abi-generic" "$CACHE/vmlinuz"
	echo "$abi-generic" >"$CACHE/abi"
	echo "$kd" >"$CACHE/kdir"
	rm -rf "$CACHE/apt"
	touch "$CACHE/fetch.stamp"
	log "fetched kernel $abi-generic in $((SECONDS - t0))s"
}

cmd_build() {
	[ -f "$CACHE/fetch.stamp" ] || cmd_fetch
	need_tools
	local t0=$SECONDS kd
	kd=$(kdir)
	mkdir -p "$OUT"
	log "building modules against $(cat "$CACHE/abi")"
	local kmake=() ksrc=$REPO/kmod
	if [ "$KSERIES" = 7.x ]; then
		# its own copy of kmod/ (the 6.12 build's objects stay), this
		# machine's gcc (the headers name Ubuntu's gcc-13) and noble's pahole
		rm -rf "$OUT/kmod" && cp -r "$REPO/kmod" "$OUT/kmod" && ksrc=$OUT/kmod
		kmake=(CC=gcc PAHOLE="$CACHE/pahole")
	fi
	make -s -C "$kd" M="$ksrc" "${kmake[@]}" modules >"$OUT/kbuild.log" 2>&1 || { cat "$OUT/kbuild.log"; die "module build failed"; }
	grep -i warn "$OUT/kbuild.log" | grep -v 'differs from the one used to build the kernel' || true
	cp "$ksrc/gpuext/gpuext.ko" "$ksrc/gpusim/gpusim.ko" "$OUT/"
	build_sdk_policies
	log "building the static guest test binary"
	# The SIMULATED benchmark (bench_test.go) is compiled in only for `lab.sh bench`.
	(cd "$REPO" && CGO_ENABLED=0 go test -tags "kernellab${KERNEL_LAB_EXTRA_TAGS:+,$KERNEL_LAB_EXTRA_TAGS}" -c -o "$OUT/guest.test" ./test/kernel/guest) || die "guest test build failed"
	log "built in $((SECONDS - t0))s"
}

# build_sdk_policies: the SDK test's host half.  Each example policy
# (examples/*) and the lab's SDK fixtures (test/kernel/guest/sdkpolicies) are
# copied into a temporary directory outside the tree that holds nothing but
# the SDK (make sdk), built there with clang, and installed into the
# kernel policy directory the guest tests attach from (/lab/policydir;
# fixtures without a descriptor into /lab/sdkobjects).
build_sdk_policies() {
	local tmp d name
	tmp=$(mktemp -d /tmp/gpuext-sdk-lab.XXXXXX)
	make -s -C "$REPO" sdk SDK_DIR="$tmp/sdk" >/dev/null
	rm -rf "$OUT/policydir" "$OUT/sdkobjects"
	mkdir -p "$OUT/policydir" "$OUT/sdkobjects"
	for d in "$REPO"/examples/*/ "$REPO/test/kernel/guest/sdkpolicies/"; do
		name=$(basename "$d")
		[ "$name" = probes ] && continue # device probes (docs/write-a-probe.md): their own SDK test
		cp -r "$d" "$tmp/$name"
		make -s -C "$tmp/$name" GPUEXT_SDK="$tmp/sdk" >"$OUT/sdk-$name.log" 2>&1 || { cat "$OUT/sdk-$name.log"; rm -rf "$tmp"; die "SDK build of $name failed"; }
		if ls "$tmp/$name"/*.json >/dev/null 2>&1; then
			make -s -C "$tmp/$name" GPUEXT_SDK="$tmp/sdk" install POLICY_DIR="$OUT/policydir" >/dev/null
		else
			cp "$tmp/$name"/*.bpf.o "$OUT/sdkobjects/"
		fi
	done
	rm -rf "$tmp"
	log "SDK policies built outside the tree: $(cd "$OUT/policydir" && echo *) + $(cd "$OUT/sdkobjects" && echo *)"
}

make_initramfs() {
	local ir=$OUT/initramfs bb
	bb=$(busybox_static) || die "no static busybox"
	rm -rf "$ir"
	mkdir -p "$ir"/{bin,sbin,proc,sys,dev,tmp,lab,etc}
	cp "$bb" "$ir/bin/busybox"
	cp "$OUT/gpuext.ko" "$OUT/gpusim.ko" "$OUT/guest.test" "$ir/lab/"
	cp "$REPO/test/kernel/init.sh" "$ir/init"
	cp -r "$OUT/policydir" "$OUT/sdkobjects" "$ir/lab/"
	chmod 755 "$ir/init"
	(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1 >"$OUT/initrd.cpio.gz")
}

# series_tests: the guest tests each series runs (init.sh hands them to
# go test): 7.x only what needs its kernel (the dmem controller), 6.12 the
# rest.  KERNEL_LAB_APPEND's own GPUEXT_KERNEL_TEST_RUN (lab.sh bench) comes
# after this on the command line and wins.
series_tests() {
	case "$KSERIES" in
	7.x) echo "GPUEXT_KERNEL_TEST_RUN=^TestDmemKernel" ;;
	*) echo "GPUEXT_KERNEL_TEST_SKIP=^TestDmemKernel" ;;
	esac
}

boot_once() {
	local serial=$1 rc=0
	timeout --foreground "$TIMEOUT" qemu-system-x86_64 -accel tcg -smp 1 -m 1G -nographic -no-reboot \
		-device isa-debug-exit,iobase=0xf4,iosize=0x04 \
		-kernel "$CACHE/vmlinuz" -initrd "$OUT/initrd.cpio.gz" \
		-append "console=ttyS0 panic=-1 oops=panic quiet $(series_tests) ${KERNEL_LAB_APPEND:-}" </dev/null >"$serial" 2>&1 || rc=$?
	return $rc
}

# qemu_outcome RC: what qemu's exit status says. The guest's /init reports
# through the isa-debug-exit device, which makes qemu exit with
# (code << 1) | 1: 1 is the guest's success, not an error.
qemu_outcome() {
	local rc=$1
	case $rc in
	1) echo "the guest reported success (debug-exit code 0)" ;;
	124) echo "timed out after ${TIMEOUT}s (qemu killed)" ;;
	0) echo "the guest powered off without a debug-exit report (it died before /init's end)" ;;
	*) if ((rc % 2 == 1 && rc < 128)); then echo "the guest reported failure (debug-exit code $((rc >> 1)))"; else echo "qemu itself failed (exit status $rc)"; fi ;;
	esac
}

# guest_said SERIAL: the guest's verdict line (KERNEL-LAB PASS or FAIL rc=N).
guest_said() {
	tr -d '\r' <"$1" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -oE 'KERNEL-LAB (PASS|FAIL).*' | tail -1 || true
}

cmd_run() {
	[ -f "$OUT/guest.test" ] || cmd_build
	need_tools
	local t0=$SECONDS attempt rc serial
	make_initramfs
	for attempt in 1 2; do
		serial=$OUT/serial-$attempt.log
		log "booting qemu (attempt $attempt, serial log $serial)"
		rc=0
		boot_once "$serial" || rc=$?
		# Guest test output: everything between the markers.
		# (the console may prefix the first line with terminal escapes: no ^ anchor)
		tr -d '\r' <"$serial" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' | sed -n '/KERNEL-LAB TESTS BEGIN/,/^KERNEL-LAB \(PASS\|FAIL\)/p'
		if grep -q 'KERNEL-LAB TESTS BEGIN' "$serial"; then break; fi
		if grep -qE 'Oops|BUG:|Kernel panic|general protection' "$serial" && [ "$attempt" = 1 ]; then
			log "early oops/panic before the tests started; retrying once"
			grep -E 'Oops|BUG:|Kernel panic|general protection' "$serial" | head -5
			continue
		fi
		break
	done
	local said
	said=$(guest_said "$serial")
	log "guest said: ${said:-nothing (no KERNEL-LAB line)}; qemu: $(qemu_outcome "$rc"); after $((SECONDS - t0))s"
	if grep -qE 'Oops|BUG:|Kernel panic|general protection|WARNING:' "$serial"; then
		log "kernel log shows a problem:"
		grep -E -A20 'Oops|BUG:|Kernel panic|general protection|WARNING:' "$serial" | tr -d '\r' | head -60
	fi
	if tr -d '\r' <"$serial" | grep -q '^KERNEL-LAB PASS' && [ "$rc" = 1 ]; then
		log "PASS"
		return 0
	fi
	log "FAIL ($(qemu_outcome "$rc"); serial log tail follows)"
	tail -40 "$serial" | tr -d '\r'
	return 1
}

# cmd_bench: build the guest with -tags kernelbench and boot it (the kernel hands
# unknown name=value parameters to /init's environment), run only
# TestBenchmarkTraces and TestBenchmarkMixes (KERNEL_LAB_BENCH_RUN: another
# -run pattern), and keep their BENCH lines in bench/kernel-sim.txt.
cmd_bench() {
	cmd_fetch
	KERNEL_LAB_EXTRA_TAGS=kernelbench cmd_build
	local t0=$SECONDS dest=${KERNEL_LAB_BENCH_OUT:-$REPO/bench/kernel-sim.txt} serial tmp
	TIMEOUT=${KERNEL_LAB_BENCH_TIMEOUT:-900}
	KERNEL_LAB_APPEND="${KERNEL_LAB_APPEND:-} GPUEXT_KERNEL_TEST_RUN=${KERNEL_LAB_BENCH_RUN:-^TestBenchmark(Traces|Mixes)\$}"
	rm -f "$OUT"/serial-*.log
	cmd_run >"$OUT/bench-run.log" 2>&1 || { cat "$OUT/bench-run.log"; die "benchmark run failed"; }
	serial=$(ls -t "$OUT"/serial-*.log | head -1)
	tmp=$(mktemp)
	tr -d '\r' <"$serial" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -oE 'BENCH(-BEGIN|-END|-MIX|-MIXSUM|-MIXUCP)? .*SIMULATED' >"$tmp" || true
	grep -q '^BENCH-END' "$tmp" || { rm -f "$tmp"; cat "$OUT/bench-run.log"; die "no BENCH-END line in $serial"; }
	mkdir -p "$(dirname "$dest")"
	{
		echo "# gpuext kernel-lab trace-replay benchmark -- SIMULATED (gpusim memory model in a qemu TCG guest, no GPU)"
		echo "# machine: $(uname -nmr) $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
		echo "# guest kernel: $(cat "$CACHE/abi"), qemu -accel tcg -smp 1 -m 1G"
		echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "# commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- test/kernel kmod/gpuext kmod/gpusim kmod/include bpf 2>/dev/null || echo '+dirty')"
		echo "# command: test/kernel/lab.sh bench"
		echo "# SIMULATED: pages and faults are gpusim's counters, not measurements of a GPU"
		cat "$tmp"
	} >"$dest"
	rm -f "$tmp"
	log "benchmark: $(grep -c '^BENCH ' "$dest") runs written to $dest in $((SECONDS - t0))s"
	log "PASS"
}

case "${1:-all}" in
fetch) cmd_fetch ;;
build) cmd_build ;;
run) cmd_run ;;
all) cmd_fetch; cmd_build; cmd_run ;;
bench) cmd_bench ;;
*) die "usage: $0 fetch|build|run|all|bench" ;;
esac
