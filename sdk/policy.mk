# policy.mk - build gpuext kernel policies against this SDK.
#
# A policy's Makefile (Makefile.template) sets GPUEXT_SDK to the directory
# `make sdk` wrote and includes this file.  Every NAME.bpf.c of the
# directory becomes NAME.bpf.o, built with BTF and line info (-g): the
# loader shows the verifier's log with source file and line.
#
#   make                     build the objects
#   make install POLICY_DIR=DIR
#                            copy the objects and their NAME.json descriptors
#                            into DIR (the host's kernelPolicyDir)
#   make clean
#
# Needs clang (BPF target) and libbpf's headers (bpf/bpf_helpers.h).

ifndef GPUEXT_SDK
$(error set GPUEXT_SDK to the directory `make sdk` wrote)
endif

CLANG ?= clang
# Debian/Ubuntu keep asm/types.h under the multiarch include dir.
MULTIARCH ?= $(shell gcc -print-multiarch 2>/dev/null)
BPF_CFLAGS ?= -g -O2 -Wall -Werror
POLICY_SRCS ?= $(wildcard *.bpf.c)
POLICY_OBJS := $(POLICY_SRCS:.c=.o)
POLICY_DESCS := $(POLICY_SRCS:.bpf.c=.json)

.PHONY: all install clean
all: $(POLICY_OBJS)

%.bpf.o: %.bpf.c $(wildcard $(GPUEXT_SDK)/include/*.h)
	$(CLANG) --target=bpf $(BPF_CFLAGS) -I$(GPUEXT_SDK)/include \
		$(if $(MULTIARCH),-I/usr/include/$(MULTIARCH)) -c $< -o $@

install: all
	@test -n "$(POLICY_DIR)" || { echo "set POLICY_DIR to the host's kernelPolicyDir"; exit 1; }
	install -d $(POLICY_DIR)
	install -m 0644 $(POLICY_OBJS) $(POLICY_DESCS) $(POLICY_DIR)/

clean:
	rm -f $(POLICY_OBJS)
