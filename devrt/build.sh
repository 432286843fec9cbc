#!/bin/sh
# devrt/build.sh OUTDIR - builds the device runtime and its CI fixtures with gcc only.
#
#   OUTDIR/libgpuext-devrt.so   the interposer (what admission injects)
#   OUTDIR/usage_dump           prints a tenant's usage file / the board as key=value lines
#   OUTDIR/ptxpatch_cli         the interposer's image inspection and PTX splice on files (golden tests)
#   OUTDIR/fake/libcuda.so.1    fake driver for CI (never install it next to the interposer)
#   OUTDIR/fake/libnvidia-ml.so.1  fake NVML for CI
#   OUTDIR/fake/app_procaddr, app_linked, app_image, libchain.so   test apps
#
# Reproducible: fixed flags, no timestamps, paths mapped out of debug info.
# CC overrides the compiler (default gcc).
set -eu
out=${1:?usage: devrt/build.sh OUTDIR}
src=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-gcc}
mkdir -p "$out/fake"
out=$(cd "$out" && pwd)
cflags="-O2 -fPIC -Wall -Wextra -Werror -std=gnu11 -ffile-prefix-map=$src=devrt -I$src/include -I$src/lib"

# shellcheck disable=SC2086
$cc $cflags -shared -fvisibility=hidden -Wl,-Bsymbolic-functions -Wl,-soname,libgpuext-devrt.so -Wl,--build-id=sha1 \
	-o "$out/libgpuext-devrt.so" \
	"$src/lib/devrt.c" "$src/lib/settings.c" "$src/lib/resolve.c" "$src/lib/lookup.c" "$src/lib/wrappers.c" \
	"$src/lib/acct.c" "$src/lib/priority.c" \
	"$src/lib/probe_load.c" "$src/lib/probe_files.c" "$src/lib/probe_bind.c" "$src/lib/probe_clock.c" "$src/lib/probe_copyout.c" \
	"$src/lib/probe_ctx.c" "$src/lib/probe_launch.c" "$src/lib/probe_hostlaunch.c" \
	"$src/lib/ptxpatch.c" "$src/lib/fatbin.c" -ldl -lpthread
# shellcheck disable=SC2086
$cc $cflags -o "$out/usage_dump" "$src/tools/usage_dump.c"
# shellcheck disable=SC2086
$cc $cflags -o "$out/ptxpatch_cli" "$src/tools/ptxpatch_cli.c" "$src/lib/ptxpatch.c" "$src/lib/fatbin.c" -ldl

# shellcheck disable=SC2086
$cc $cflags -shared -fvisibility=hidden -Wl,-soname,libcuda.so.1 -o "$out/fake/libcuda.so.1" \
	"$src/fake/fakecuda.c" "$src/lib/fatbin.c" -ldl -lpthread
# shellcheck disable=SC2086
$cc $cflags -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -o "$out/fake/libnvidia-ml.so.1" \
	"$src/fake/fakenvml.c"
# shellcheck disable=SC2086
$cc $cflags -shared -fvisibility=hidden -o "$out/fake/libchain.so" "$src/testapps/chainlib.c" -ldl
# shellcheck disable=SC2086
$cc $cflags -o "$out/fake/app_procaddr" "$src/testapps/app_procaddr.c" -ldl
# shellcheck disable=SC2086
$cc $cflags -o "$out/fake/app_image" "$src/testapps/app_image.c" -ldl
# shellcheck disable=SC2086
$cc $cflags -o "$out/fake/app_linked" "$src/testapps/app_linked.c" -L"$out/fake" -l:libcuda.so.1 -ldl
