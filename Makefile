# gpuext - per-container GPU policies for containerd and Docker.
# `make help` lists the targets.

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
CACHE := $(CURDIR)/.cache
export PATH := $(CACHE)/bin:$(PATH)
# go-nvml's header marks many NVML calls deprecated; its cgo build warns for each.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations
# Test binaries run as root and use real cgroups, bpffs and runtimes; CI sets CI=true
# so that a privileged test that cannot run fails instead of skipping.
GOTEST_FLAGS ?= -count=1 -timeout 45m

STATIC_BINS := gpuext-nri-plugin gpuext-oci-hook gpuext-runc
.PHONY: help deps generate build image chart-lint test test-go test-unit test-e2e demo demo-k8s bench kernel-test gpu-prep gpu-test gpu-node-prep gpu-node lint clean

help: ## list targets
	@grep -hE '^[a-z][a-z0-9-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## install what the tests and demo need (apt packages, containerd, crictl; cached in .cache/)
	@test/lab/install-deps.sh

generate: ## regenerate the bpf2go bindings (clang) and the devrt layouts, env names and probe ABI (gcc); CI fails if they differ from the committed ones
	$(GO) generate ./bpf/... ./devrt/board/... ./devrt/probefiles/maps ./devrt/probefiles/launches ./gpubpf/programs ./devrt/tenantcfg ./gpubpf/abi

build: ## build the static binaries and the device runtime (libgpuext-devrt.so) into bin/
	@mkdir -p $(BIN)/devrt
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/gpuext-nri-plugin ./nri-plugin
	@# the hooks run at every container create: no DWARF (-w; panics still print their stack)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-w -o $(BIN)/gpuext-oci-hook ./oci-hook/cmd/gpuext-oci-hook
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-w -o $(BIN)/gpuext-runc ./oci-hook/cmd/gpuext-runc
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/gpuextctl ./cmd/gpuextctl
	$(GO) build -trimpath -o $(BIN)/gpuext-gpuview ./cmd/gpuext-gpuview  # cgo: NVML
	sh devrt/build.sh $(BIN)/devrt-build
	install -m 0755 $(BIN)/devrt-build/libgpuext-devrt.so $(BIN)/devrt/libgpuext-devrt.so

# The agent's OCI image (deploy/image; no base image, reproducible): name, and labels from git.
IMAGE_NAME ?= localhost/gpuext
IMAGE_TAG ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image: build ## the agent's OCI image from bin/ (no base image, reproducible): bin/gpuext-image.tar, named in bin/gpuext-image.ref; ctr -n k8s.io images import it
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) $(GO) run ./deploy/image --bin $(BIN) --name $(IMAGE_NAME):$(IMAGE_TAG) \
		--version $(IMAGE_TAG) --revision $$(git rev-parse HEAD) --source https://github.com/gpuext/gpuext --out $(BIN)/gpuext-image.tar
	@echo $(IMAGE_NAME):$(IMAGE_TAG) > $(BIN)/gpuext-image.ref

chart-lint: ## helm lint and helm template tests of deploy/helm/gpuext (helm from .cache/k8s/bin)
	$(GO) test -count=1 ./deploy/helm

test: ## every test CI runs: unit, privileged (real BPF/cgroups), NRI in-process, real runtimes, the qemu kernel lab; one line per phase with its seconds at the end
	@test/phases.sh deps build lint kernel-test test-go

test-go: ## go test of every package (as root: the privileged and real-runtime tests too); `make test`'s last phase
	@echo "[test] go test (needs root for the privileged and real-runtime tests)"
	set -o pipefail; $(GO) test $(GOTEST_FLAGS) -p 1 ./... 2>&1 | tee $(CACHE)/test.log
	@echo "[test] summary:"; grep -E '^(ok|FAIL|---)' $(CACHE)/test.log | grep -vE '^--- PASS' || true

# Packages whose tests are end to end: real runtimes, the Kubernetes lab, the
# kernel lab's guest. Every other package runs in test-unit; its privileged
# tests skip without root (lib/testutil.SkipOrFail: they fail instead when CI=true).
test-unit: ## every package whose tests need no root (the privileged ones skip without root); not ./test/...
	$(GO) test -count=1 -p 1 $$($(GO) list ./... | grep -vE '/test(/|$$)')

test-e2e: deps build ## only the real-runtime end-to-end tests
	$(GO) test $(GOTEST_FLAGS) -v ./test/e2e/...

demo: deps build ## real containerd + NRI + runc: labelled containers and the tenant table
	@test/demo.sh

demo-k8s: deps image ## a real single-node Kubernetes cluster: helm install the chart, pods asking for gpuext.io/gpu-memory, one Pending, the tenant table, helm uninstall
	@test/demo-k8s.sh

bench: deps image ## admission latency, crictl with/without the plugin (bench/results.txt); kernel-lab trace replay, SIMULATED (bench/kernel-sim.txt, docs/kernel-sim.png)
	@test/bench.sh
	@test/kernel/lab.sh bench
	@$(GO) run ./test/kernel/benchplot -in bench/kernel-sim.txt -png docs/kernel-sim.png

# The policy SDK: the headers come from kmod/include (one source), never copies kept in the tree.
SDK_DIR ?= $(BIN)/sdk
SDK_HEADERS := kmod/include/gpuext_abi.h kmod/include/gpuext_prio.h kmod/include/gpuext_ops.h kmod/include/gpuext_kfuncs.h kmod/include/gpuext_policy.h
# the device probes' header (gpubpf/programs, beside the built-in probes that include it)
SDK_PROBE_HEADERS := $(wildcard gpubpf/programs/*.h)
.PHONY: sdk
sdk: ## the kernel-policy and device-probe SDK into SDK_DIR (default bin/sdk): headers from kmod/include and gpubpf/programs, policy.mk, probe.mk, their Makefile templates (docs/write-a-policy.md, docs/write-a-probe.md)
	install -d $(SDK_DIR)/include
	install -m 0644 $(SDK_HEADERS) $(SDK_PROBE_HEADERS) $(SDK_DIR)/include/
	install -m 0644 sdk/policy.mk sdk/Makefile.template sdk/probe.mk sdk/Makefile.probe.template $(SDK_DIR)/
	@# bpftime-style device programs build unchanged with -I $(SDK_DIR)/include/bpftime (gpubpf/programs/bpftime, when the tree has it)
	if [ -d gpubpf/programs/bpftime ]; then rm -rf $(SDK_DIR)/include/bpftime && cp -r gpubpf/programs/bpftime $(SDK_DIR)/include/bpftime; fi
	install -d $(SDK_DIR)/include/compat/gpu_ext
	install -m 0644 kmod/include/compat/gpu_ext/*.h $(SDK_DIR)/include/compat/gpu_ext/

kernel-test: ## boot Debian's 6.12 kernel in qemu with gpuext.ko + gpusim.ko and run the guest tests (cached in .cache/kernel), then a 7.x kernel for the dmem tests (.cache/kernel-7.x)
	@test/kernel/lab.sh all
	@KERNEL_LAB_SERIES=7.x test/kernel/lab.sh all

gpu-prep: build ## here, as root (needs Go and BPF_PROG_TEST_RUN): what gpu-test carries: bin/ (static gpuextctl), out/gpu/corpus (the differential corpus with the kernel's own results), out/gpu/probedir (the example probes built with the SDK), out/gpu/bpftime-dir (our bpftime-style programs), out/gpu/bpftime-objs (when out/bpftime holds bpftime's objects), out/gpu/kubelet-stub (the kubelet's side of the device plugin, for the multi-gpu section)
	$(GO) run ./gpubpf/cmd/gpuext-probe-corpus --out out/gpu/corpus
	gzip -f out/gpu/corpus/corpus.txt out/gpu/corpus/corpus.ptx  # ~100 MB of mostly-zero map images -> ~1 MB
	CGO_ENABLED=0 $(GO) build -trimpath -o out/gpu/kubelet-stub ./test/gpu/kubeletstub  # static: no Go on the GPU machine
	@# the example probes (examples/probes), built outside the tree with only the SDK, as a probeDir
	@rm -rf out/gpu/probedir && d=$$(mktemp -d) && $(MAKE) -s sdk SDK_DIR=$$d/sdk && \
	for p in examples/probes/*/; do n=$$(basename $$p); cp -r $$p $$d/$$n && \
		$(MAKE) -s -C $$d/$$n GPUEXT_SDK=$$d/sdk install PROBE_DIR=$(CURDIR)/out/gpu/probedir >/dev/null || { rm -rf $$d; exit 1; }; done; \
	rm -rf $$d; echo "out/gpu/probedir: $$(cd out/gpu/probedir && echo *)"
	@# our bpftime-style programs (gpubpf/compile/testdata/bpftime) built with the SDK's include/bpftime, sections naming vecadd's kernel, as a probeDir
	@rm -rf out/gpu/bpftime-dir && mkdir -p out/gpu/bpftime-dir && d=$$(mktemp -d) && $(MAKE) -s sdk SDK_DIR=$$d/sdk && \
	for s in thread_hist ret_snoop launch_bins call_counter launch_gap; do n=$$(echo $$s | tr _ -); \
		sed 's/_Z4gridPj/_Z4vaddPKfS0_Pfi/g' gpubpf/compile/testdata/bpftime/$$s.bpf.c >$$d/$$s.bpf.c && \
		clang --target=bpf -g -O2 -Wall -Werror -I $$d/sdk/include/bpftime -I $$d/sdk/include -c $$d/$$s.bpf.c -o out/gpu/bpftime-dir/$$n.bpf.o && \
		cp gpubpf/compile/testdata/bpftime/$$n.json out/gpu/bpftime-dir/ || { rm -rf $$d; exit 1; }; done; \
	rm -rf $$d; echo "out/gpu/bpftime-dir: $$(cd out/gpu/bpftime-dir && echo *)"
	@# objects built by hand from bpftime's unmodified sources (out/bpftime/*.o, never committed): one probe directory each with a generated descriptor
	@rm -rf out/gpu/bpftime-objs; if ls out/bpftime/*.o >/dev/null 2>&1; then \
	i=0; for o in out/bpftime/*.o; do i=$$((i + 1)); n=$$(printf 'bt%02d-%s' $$i "$$(basename $$o .o | sed 's/[.]bpf$$//; s/_/-/g' | tr A-Z a-z | tr -cd 'a-z0-9-')" | cut -c1-31); mkdir -p out/gpu/bpftime-objs/$$n && cp $$o out/gpu/bpftime-objs/$$n/$$n.bpf.o && \
		$(GO) run ./gpubpf/cmd/gpuext-probe-describe --name $$n out/gpu/bpftime-objs/$$n/$$n.bpf.o >out/gpu/bpftime-objs/$$n/$$n.json 2>out/gpu/bpftime-objs/$$n/describe.err && \
		rm out/gpu/bpftime-objs/$$n/describe.err || rm -f out/gpu/bpftime-objs/$$n/$$n.json; done; \
	echo "out/gpu/bpftime-objs: $$(cd out/gpu/bpftime-objs && echo *)"; fi

gpu-test: ## on the GPU machine (not CI, no Go there; carry bin/ and out/gpu from gpu-prep): the device runtime and device probes with real CUDA apps; one PASS/FAIL line per check
	@bash test/gpu/gpu-test.sh

gpu-node-prep: deps build ## here, as root: what gpu-node carries, into out/gpu-node (containerd, crictl, runc, nvidia-ctk, the gpuext binaries, the lab images; ~40 MiB)
	@bash test/gpu-node/prep.sh

gpu-node: ## on the GPU machine (carry out/gpu-node from gpu-node-prep): containerd + NRI + CDI + runc + MPS + the agent, containers from annotations with real frameworks; one PASS/FAIL line per check
	@bash test/gpu-node/gpu-node.sh

lint: ## gofmt, go vet, the hooks' and the policy model's imports (go list -deps), the layers' imports, generated files up to date
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	@# the hooks are thin clients of the agent: go list -deps of both binaries against what they may link (internal/agentapi/deps_test.go)
	@$(GO) test -count=1 -run '^(TestHookImports|TestThinViolations)$$' ./internal/agentapi >/dev/null || { $(GO) test -count=1 -run '^TestHookImports$$' ./internal/agentapi; echo "a hook binary links more than the agent's API and small pure packages: see internal/agentapi/deps_test.go"; exit 1; }
	@# the policy model is pure (of gpubpf only the probe names leaf), gpubpf imports neither policies nor devrt, and no import loop (tests included) in policies, gpubpf, devrt (internal/agentapi/deps_test.go)
	@$(GO) test -count=1 -run '^(TestPolicyImports|TestPolicyViolations|TestNoImportLoops|TestImportLoop)$$' ./internal/agentapi >/dev/null || { $(GO) test -count=1 -run '^(TestPolicyImports|TestNoImportLoops)$$' ./internal/agentapi; echo "policies links cilium/ebpf or the device-eBPF toolchain, gpubpf links policies or devrt, or an import loop: see internal/agentapi/deps_test.go"; exit 1; }
	@# the layers: no lower package (policies, devrt, bpf, cgroup, kmod, lib, gpubpf) imports internal/; lib/ imports only lib/ (internal/agentapi/layers_test.go)
	@$(GO) test -count=1 -run '^(TestLayers|TestLayerViolations)$$' ./internal/agentapi >/dev/null || { $(GO) test -count=1 -run '^TestLayers$$' ./internal/agentapi; echo "a lower package imports internal/, or lib/ imports outside lib/: see internal/agentapi/layers_test.go"; exit 1; }
	@# never skipped: without clang (make deps installs it, as CI does) lint fails instead of passing unchecked
	@command -v clang >/dev/null && test -f /usr/include/bpf/bpf_helpers.h || { echo "lint: the bpf2go drift check needs clang and libbpf-dev (make deps installs them): not skipped, failing"; exit 1; }
	@$(GO) generate ./bpf/... ./gpubpf/programs && git diff --exit-code --stat -- bpf/ gpubpf/programs/ || { echo "generated bpf files differ from the committed ones: run make generate and commit"; exit 1; }
	@bash kmod/nvidia/check.sh --dry-run  # CI has no NVIDIA tree: patch format only, no build claimed
	@$(GO) generate ./devrt/board && git diff --exit-code --stat -- devrt/board/ || { echo "devrt/board/layout_gen.go differs from devrt/include/gpuext_devrt_shm.h: run make generate and commit"; exit 1; }
	@$(GO) generate ./devrt/probefiles/maps && git diff --exit-code --stat -- devrt/probefiles/maps/layout_gen.go || { echo "devrt/probefiles/maps/layout_gen.go differs from devrt/include/gpuext_devrt_maps.h: run make generate and commit"; exit 1; }
	@$(GO) generate ./devrt/probefiles/launches && git diff --exit-code --stat -- devrt/probefiles/launches/layout_gen.go || { echo "devrt/probefiles/launches/layout_gen.go differs from devrt/include/gpuext_devrt_launches.h: run make generate and commit"; exit 1; }
	@$(GO) generate ./devrt/tenantcfg && git diff --exit-code --stat -- devrt/tenantcfg/ || { echo "devrt/tenantcfg/*_gen.go differ from devrt/include/gpuext_devrt_tenant.h, gpuext_devrt_env.h: run make generate and commit"; exit 1; }
	@$(GO) generate ./gpubpf/abi && git diff --exit-code --stat -- gpubpf/abi/abi_gen.go || { echo "gpubpf/abi/abi_gen.go differs from kmod/include/gpuext_abi.h, devrt/lib/ptxpatch.h, devrt/include/gpuext_devrt_probes.h: run make generate and commit"; exit 1; }

clean: ## remove build outputs (keeps the .cache of containerd/crictl)
	rm -rf $(BIN)
