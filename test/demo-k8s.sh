#!/usr/bin/env bash
# demo-k8s.sh (make demo-k8s): issue 15's story for a person, on a real
# single-node Kubernetes cluster on this machine (test/k8s/cluster.sh: etcd,
# kube-apiserver, controller-manager, scheduler, kubelet on the lab's
# containerd 2.4 with NRI). Through helm and kubectl only:
#   - the agent's image (make image) imported, the chart installed: a
#     DaemonSet running the agent as an NRI plugin and a device plugin that
#     advertises gpuext.io/gpu-memory (8 GiB here: there is no GPU, so the
#     size comes from the chart's devicePlugin.gpus);
#   - two pods asking for 4 units each (one lowers its quota to 2 GiB with an
#     annotation) become tenants; a third asking for 3 stays Pending with the
#     scheduler's Insufficient gpuext.io/gpu-memory, and runs once one goes;
#   - the tenant table, and what a container really sees;
#   - helm uninstall: no pinned map and no tenant directory left.
# Then it stops the cluster. Needs root. `make demo-k8s` runs `make deps image` first.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="$REPO/bin"
export GPUEXT_K8S_DIR="${GPUEXT_DEMO_K8S_DIR:-$REPO/.cache/k8s/demo}"
WORK="$GPUEXT_K8S_DIR/gpuext"
PIN_DIR="/sys/fs/bpf/gpuext-demo-k8s"
STATE_DIR="$WORK/state"
CLUSTER="$REPO/test/k8s/cluster.sh"
t0=$(date +%s)
step() { printf '\n\033[1m[demo-k8s %3ss] %s\033[0m\n' "$(( $(date +%s) - t0 ))" "$*"; }
die() { echo "demo-k8s: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (kubelet, containerd, cgroups, bpffs)"
for f in gpuext-image.tar gpuext-image.ref gpuextctl; do
	[[ -e "$BIN/$f" ]] || die "$BIN/$f missing: run 'make image' (make demo-k8s does)"
done
IMAGE="$(cat "$BIN/gpuext-image.ref")"

# The chart's bpffs.mountPropagation None (this machine's mounts are
# private): the node needs a bpf filesystem before the agent starts.
MOUNTED_BPFFS=""
if [[ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != "bpf_fs" ]]; then
	mount -t bpf bpf /sys/fs/bpf
	MOUNTED_BPFFS=1
fi

installed=""
cleanup() {
	step "cleaning up: helm uninstall (if still installed), the cluster, mounts"
	if [[ -n "$installed" ]]; then
		"$CLUSTER" helm uninstall gpuext -n gpuext-system --wait --timeout 1m >/dev/null 2>&1 || true
	fi
	"$CLUSTER" down >/dev/null 2>&1 || true
	rm -rf "$PIN_DIR" "$WORK"
	[[ -n "$MOUNTED_BPFFS" ]] && umount /sys/fs/bpf 2>/dev/null || true
	echo "done in $(( $(date +%s) - t0 ))s"
}
trap cleanup EXIT

step "starting a single-node cluster (etcd, apiserver, controller-manager, scheduler, kubelet on containerd+NRI)"
"$CLUSTER" up
eval "$("$CLUSTER" env)"
k() { "$GPUEXT_K8S_KUBECTL" "$@"; }

step "importing the agent's image $IMAGE (built by make image, no registry)"
"$CLUSTER" ctr images import "$BIN/gpuext-image.tar" >/dev/null

step "helm install deploy/helm/gpuext (DaemonSet, device plugin with 8 GiB, strict fail mode)"
mkdir -p "$WORK"
cat >"$WORK/values.yaml" <<EOF
image: {name: ${IMAGE%:*}, tag: ${IMAGE##*:}, pullPolicy: Never}
nri: {socket: $NRI_SOCKET}
bpffs: {mountPropagation: None}
config:
  failMode: strict
  pinDir: $PIN_DIR
  stateDir: $STATE_DIR
  devrtDir: $WORK/devrt
  agentSocket: $WORK/sock/agent.sock
kubeletDir: $GPUEXT_K8S_KUBELET_ROOT
devicePlugin:
  enabled: true
  gpus: [{memory: 8GiB}]
  cdi: {enabled: false}   # no GPU here, so no CDI spec to resolve nvidia.com/gpu names in
EOF
"$CLUSTER" helm install gpuext "$REPO/deploy/helm/gpuext" -n gpuext-system --create-namespace -f "$WORK/values.yaml" --wait --timeout 3m
installed=1
k -n gpuext-system rollout status daemonset/gpuext --timeout 2m
k -n gpuext-system get daemonset,pods -o wide
for _ in $(seq 60); do
	[[ "$(k get node "$GPUEXT_K8S_NODE" -o 'jsonpath={.status.allocatable.gpuext\.io/gpu-memory}')" == 8 ]] && break
	sleep 1
done
echo "node $GPUEXT_K8S_NODE allocatable gpuext.io/gpu-memory: $(k get node "$GPUEXT_K8S_NODE" -o 'jsonpath={.status.allocatable.gpuext\.io/gpu-memory}') (units of 1 GiB)"

pod() { # name units annotations-yaml
	cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations: {$3}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $GPUEXT_LAB_IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources:
      limits:
        gpuext.io/gpu-memory: $2
EOF
}
step "two pods asking for 4 GiB each: trainer (best-effort), notebook (lowers its quota to 2GiB by annotation)"
pod trainer 4 '"priority.gpuext.io": "best-effort"' | k apply -f -
pod notebook 4 '"quota.gpuext.io": "2GiB"' | k apply -f -
k wait --for=condition=Ready pod/trainer pod/notebook --timeout=2m

step "a third pod asking for 3 GiB: 8 are advertised, 8 are taken, so the scheduler keeps it Pending"
pod batch 3 '' | k apply -f -
for _ in $(seq 30); do
	k get events --field-selector involvedObject.name=batch -o 'jsonpath={.items[*].message}' | grep -q 'Insufficient gpuext.io/gpu-memory' && break
	sleep 1
done
k get pod batch
k get events --field-selector involvedObject.name=batch -o 'custom-columns=REASON:.reason,MESSAGE:.message'

gpuextctl() { "$BIN/gpuextctl" --config "$WORK/gpuextctl.json" "$@"; }
printf '{"pinDir":"%s","stateDir":"%s"}\n' "$PIN_DIR" "$STATE_DIR" >"$WORK/gpuextctl.json"
step "the tenant table (gpuextctl tenants): every container on the node is a tenant; the pods' quotas are their requests"
gpuextctl tenants

step "what trainer's container sees: its tenant, the GPU it was given, its settings"
k exec trainer -- sh -c 'env | grep -E "^(GPUEXT_|CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|LD_PRELOAD)" | sort; echo; cat /run/gpuext/tenant/config.json'

step "deleting trainer frees its 4 GiB: batch is scheduled"
k delete pod trainer --wait
k wait --for=condition=Ready pod/batch --timeout=2m
gpuextctl tenants

step "helm uninstall: the agent sees its DaemonSet deleted and cleans the node; the pods keep running"
"$CLUSTER" helm uninstall gpuext -n gpuext-system --wait --timeout 1m
installed=""
for _ in $(seq 30); do [[ ! -e "$PIN_DIR" ]] && break; sleep 1; done
echo "pinned maps left under $PIN_DIR: $(ls "$PIN_DIR" 2>/dev/null | wc -l)"
echo "tenant directories left under $STATE_DIR: $(ls "$STATE_DIR/tenants" 2>/dev/null | wc -l)"
k get pods
