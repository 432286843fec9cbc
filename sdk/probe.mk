# probe.mk - build gpuext device probes against this SDK.
#
# A probe's Makefile (Makefile.probe.template) sets GPUEXT_SDK to the
# directory `make sdk` wrote and includes this file.  Every NAME.bpf.c of
# the directory becomes NAME.bpf.o, built with BTF and line info (-g): the
# device verifier names the source line of what it refuses.
#
#   make                     build the objects
#   make install PROBE_DIR=DIR
#                            copy the objects and their NAME.json descriptors
#                            into DIR (the host's probeDir)
#   make clean
#
# Needs clang (BPF target) only: gpuext_probe.h includes no system header.
#
# bpftime's GPU programs build unmodified: include/bpftime is on the path
# (their <vmlinux.h>, <bpf/bpf_helpers.h>, <bpf/bpf_tracing.h>), and the
# helper pointers every bpftime source declares, used or not (ebpf_puts,
# ...), stay warnings: -Wno-error=unused-variable prints them but does not
# fail the build; every other warning is still an error.

ifndef GPUEXT_SDK
$(error set GPUEXT_SDK to the directory `make sdk` wrote)
endif

CLANG ?= clang
PROBE_CFLAGS ?= -g -O2 -Wall -Werror -Wno-error=unused-variable
PROBE_SRCS ?= $(wildcard *.bpf.c)
PROBE_OBJS := $(PROBE_SRCS:.c=.o)
PROBE_DESCS := $(PROBE_SRCS:.bpf.c=.json)

.PHONY: all install clean
all: $(PROBE_OBJS)

%.bpf.o: %.bpf.c $(wildcard $(GPUEXT_SDK)/include/*.h $(GPUEXT_SDK)/include/bpftime/*.h $(GPUEXT_SDK)/include/bpftime/bpf/*.h)
	$(CLANG) --target=bpf $(PROBE_CFLAGS) -I$(GPUEXT_SDK)/include -I$(GPUEXT_SDK)/include/bpftime -c $< -o $@

install: all
	@test -n "$(PROBE_DIR)" || { echo "set PROBE_DIR to the host's probeDir"; exit 1; }
	install -d $(PROBE_DIR)
	install -m 0644 $(PROBE_OBJS) $(PROBE_DESCS) $(PROBE_DIR)/

clean:
	rm -f $(PROBE_OBJS)
