#!/bin/sh
# build.sh - rebuild the object fixtures of dir_test.go (go generate ./bpf/kernelpolicy
# runs it; needs clang). Relative paths and no DWARF, so the objects hold no
# path of the machine that built them; BTF and its line info stay.
set -eu
cd "$(dirname "$0")"
for c in *.bpf.c; do
	o=${c%.c}.o
	clang --target=bpf -g -O2 -Wall -fdebug-prefix-map="$(pwd)"=. -I../../../../kmod/include -I/usr/include/$(gcc -print-multiarch) -c "$c" -o "$o"
	llvm-strip -g "$o"
	case $c in *_nobtf.bpf.c) llvm-objcopy --remove-section .BTF --remove-section .BTF.ext "$o" ;; esac
done
