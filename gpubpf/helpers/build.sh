#!/bin/sh
# gpubpf/helpers/build.sh - compiles the device probe helper library
# (helpers.cu) to helpers.ptx, which helpers.go embeds. Needs nvcc (CUDA 11.8
# or later); run it on a machine with the CUDA toolkit and commit helpers.ptx.
#
# -rdc=true keeps every extern "C" __device__ function as a .visible .func
# (without it nvcc drops device functions no kernel calls); compute_75 is the
# lowest target CUDA 13 compiles for (and the library needs at least sm_70:
# independent thread scheduling makes the
# spin-waits on a hash bucket or array seq word safe inside one warp).
# NVCC overrides the compiler (default nvcc).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
nvcc=${NVCC:-nvcc}
cd "$here"
"$nvcc" -ptx -rdc=true -arch=compute_75 -O3 -std=c++14 \
	-I../../kmod/include \
	-o helpers.ptx helpers.cu
# the source it came from: TestEmbeddedLibraryIsCurrent fails when helpers.cu
# changes and helpers.ptx is not rebuilt
sum=$(sha256sum helpers.cu | cut -d' ' -f1)
{ echo "// gpuext: built by build.sh from helpers.cu sha256 $sum"; cat helpers.ptx; } >helpers.ptx.tmp && mv helpers.ptx.tmp helpers.ptx
for f in __gpuext_h_map_lookup_elem __gpuext_h_map_update_elem __gpuext_h_map_delete_elem __gpuext_h_ringbuf_output; do
	if ! grep -q "^\.visible \.func.* $f(" helpers.ptx; then
		echo "build.sh: helpers.ptx has no .visible .func $f" >&2
		exit 1
	fi
done
echo "build.sh: wrote $here/helpers.ptx"
