#!/usr/bin/env bash
# cluster.sh: a real single-node Kubernetes cluster for gpuext's tests, offline.
#
#   test/k8s/cluster.sh up        start it (idempotent); ends when the node is Ready
#   test/k8s/cluster.sh down      stop everything, unmount, rmdir its cgroups, remove
#                                 its state (etcd data, kubelet dir, containerd); keeps pki/, logs/
#   test/k8s/cluster.sh clean     down, then remove the whole work dir
#   test/k8s/cluster.sh env       print `export VAR=...` lines (KUBECONFIG, ...)
#   test/k8s/cluster.sh status    say what runs
#   test/k8s/cluster.sh kubectl ARGS...   kubectl with the admin kubeconfig
#   test/k8s/cluster.sh helm ARGS...      helm with the admin kubeconfig
#   test/k8s/cluster.sh ctr ARGS...       ctr against the cluster's containerd (namespace k8s.io)
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet
# (v1.37.2, built by test/k8s/install.sh) on loopback ports picked at the first
# `up`; the kubelet's runtime is the lab's containerd 2.4 with CRI and NRI
# (test/lab/containerd.sh, in a work dir of its own), cgroupfs driver under a
# cgroup root of its own (/gpuext-k8s-<hash> in every hierarchy, so the
# kubelet never sees other labs' /kubepods), host-network pods only (no CNI),
# the lab's local images only (no pulls: imagePullPolicy Never or IfNotPresent).
# PKI from openssl: a CA, serving and client certs, the service account keys;
# authorization Node,RBAC; the admin is in system:masters.
#
# Nothing talks to an address off loopback. The node is named `localhost`: the
# apiserver reaches the kubelet (logs, exec) by that name, on 127.0.0.1, since
# the kubelet refuses a loopback node IP. Services get addresses in
# 127.96.0.0/16 and the apiserver listens on the kubernetes Service's own,
# 127.96.0.1:443, so that a pod's in-cluster client reaches it with no kube-proxy.
# The kubelet's device plugin socket dir is fixed by Kubernetes
# (/var/lib/kubelet/device-plugins): it is bind-mounted from the kubelet's
# root dir, and one cluster runs per host (`up` refuses while another work
# dir's cluster runs).
#
# Layout of $K8S_DIR: pki/, kubeconfig/{admin,controller-manager,scheduler,kubelet}.conf,
# ports.env, logs/<component>.log, pids/<component>.pid, etcd/, kubelet/ (--root-dir),
# kubelet.yaml, pod-logs/, lab/ (GPUEXT_LAB_DIR of its containerd).
#
# Env:
#   GPUEXT_K8S_DIR   work dir (default $REPO/.cache/k8s/cluster)
#   GPUEXT_K8S_BIN   where install.sh put the binaries (default $REPO/.cache/k8s/bin)
#   GPUEXT_K8S_V     log verbosity of the components (default 1)
#   GPUEXT_LAB_BIN, GPUEXT_LAB_RUNC: passed to test/lab/containerd.sh
set -euo pipefail

K8S_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$K8S_SCRIPTS/../.." && pwd -P)"
K8S_DIR="${GPUEXT_K8S_DIR:-$REPO/.cache/k8s/cluster}"
mkdir -p "$K8S_DIR"
K8S_DIR="$(cd "$K8S_DIR" && pwd -P)"
K8S_BIN="${GPUEXT_K8S_BIN:-$REPO/.cache/k8s/bin}"
# The cluster's containerd has a lab work dir of its own.
export GPUEXT_LAB_DIR="$K8S_DIR/lab"
# shellcheck source=test/lab/lib.sh
source "$REPO/test/lab/lib.sh"

K8S_HASH="$(printf '%s' "$K8S_DIR" | sha256sum | cut -c1-12)"
NODE=localhost
PKI="$K8S_DIR/pki"
KCONF="$K8S_DIR/kubeconfig"
LOGS="$K8S_DIR/logs"
PIDS="$K8S_DIR/pids"
KUBELET_ROOT="$K8S_DIR/kubelet"
POD_LOGS="$K8S_DIR/pod-logs"
CGROUP_ROOT="gpuext-k8s-$K8S_HASH"
# Fixed by the kubelet (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.DevicePluginPath).
DEVICE_PLUGIN_DIR=/var/lib/kubelet/device-plugins
# One cluster per host: the work dir of the running one.
HOST_OWNER=/run/gpuext-k8slab.owner
KUBECTL="$K8S_BIN/kubectl"
HELM="$K8S_BIN/helm"
V="${GPUEXT_K8S_V:-1}"
# Services get loopback addresses: no kube-proxy runs, and a pod's in-cluster
# client (KUBERNETES_SERVICE_HOST=127.96.0.1, port 443, which the kubelet sets
# from the kubernetes Service) must reach the apiserver without any traffic
# leaving the host. The apiserver listens on exactly that address and port.
SERVICE_CIDR=127.96.0.0/16
SERVICE_IP=127.96.0.1
API_HOST=$SERVICE_IP
API_PORT=443
# Stop order: the kubelet first (no restarts of pods while the rest goes).
COMPONENTS=(kubelet kube-scheduler kube-controller-manager kube-apiserver etcd)

log() { printf '[k8s] %s\n' "$*" >&2; }
die() { printf '[k8s] ERROR: %s\n' "$*" >&2; exit 1; }

kubectl() { "$KUBECTL" --kubeconfig "$KCONF/admin.conf" "$@"; }
helm() { KUBECONFIG="$KCONF/admin.conf" HELM_CACHE_HOME="$K8S_DIR/helm/cache" \
	HELM_CONFIG_HOME="$K8S_DIR/helm/config" HELM_DATA_HOME="$K8S_DIR/helm/data" "$HELM" "$@"; }
containerd_sh() { "$REPO/test/lab/containerd.sh" "$@"; }

# --- ports ---------------------------------------------------------------------

# port_free PORT: nothing listens on 127.0.0.1:PORT (or any address).
port_free() {
	! ss -Htanl 2>/dev/null | awk '{print $4}' | grep -qE "[:.]$1\$"
}

# pick_port: a free TCP port in 20000-32767 not already picked.
PICKED=()
pick_port() {
	local p i
	for (( i = 0; i < 200; i++ )); do
		p=$(( 20000 + RANDOM % 12768 ))
		[[ " ${PICKED[*]} " == *" $p "* ]] && continue
		if port_free "$p"; then
			PICKED+=("$p")
			printf '%s\n' "$p"
			return 0
		fi
	done
	die "no free port found"
}

PORT_NAMES=(ETCD_PORT ETCD_PEER_PORT KCM_PORT SCHED_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT)

# load_ports: read ports.env; pick new ports when it is missing or one is taken.
load_ports() {
	local f="$K8S_DIR/ports.env" n ok=1
	if read_ports; then
		for n in "${PORT_NAMES[@]}"; do
			[[ -n "${!n:-}" ]] && port_free "${!n}" || ok=0
		done
		(( ok )) && return 0
	fi
	for n in "${PORT_NAMES[@]}"; do
		printf -v "$n" '%s' "$(pick_port)"
		PICKED+=("${!n}")
	done
	for n in "${PORT_NAMES[@]}"; do printf '%s=%s\n' "$n" "${!n}"; done > "$f.tmp"
	mv "$f.tmp" "$f"
}

read_ports() {
	[[ -f "$K8S_DIR/ports.env" ]] || return 1
	local n line
	while IFS= read -r line; do
		n="${line%%=*}"
		[[ " ${PORT_NAMES[*]} " == *" $n "* ]] && printf -v "$n" '%s' "${line#*=}"
	done < "$K8S_DIR/ports.env"
	return 0
}

# --- PKI -------------------------------------------------------------------------

# cert NAME CN O [SAN]: a key and a cert signed by the cluster CA (client+server usage).
cert() {
	local name="$1" cn="$2" o="$3" san="${4:-}"
	local subj="/CN=$cn"
	[[ -n "$o" ]] && subj="/O=$o$subj"
	# Made again when the subject or the names changed (e.g. another service range).
	[[ -s "$PKI/$name.crt" && "$(cat "$PKI/$name.spec" 2>/dev/null)" == "$subj $san" ]] && return 0
	printf '%s\n' "$subj $san" > "$PKI/$name.spec"
	openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[[ -n "$san" ]] && echo "subjectAltName=$san"
	} > "$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
	mkdir -p "$PKI"
	chmod 0700 "$PKI"
	if [[ ! -s "$PKI/ca.crt" ]]; then
		log "generating the cluster PKI in $PKI"
		openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
		openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=gpuext-k8slab-ca" -days 3650 -sha256 \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
			-out "$PKI/ca.crt" 2>/dev/null
	fi
	cert apiserver kube-apiserver "" \
		"DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$SERVICE_IP"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin kubernetes-admin system:masters
	cert controller-manager system:kube-controller-manager ""
	cert scheduler system:kube-scheduler ""
	cert kubelet "system:node:$NODE" system:nodes
	if [[ ! -s "$PKI/sa.key" ]]; then
		openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
}

# kubeconfig NAME CERT: a kubeconfig for user CERT against the apiserver.
kubeconfig() {
	local name="$1" crt="$2"
	mkdir -p "$KCONF"
	cat > "$KCONF/$name.conf.tmp" <<EOT
apiVersion: v1
kind: Config
clusters:
- name: gpuext-k8slab
  cluster:
    server: https://$API_HOST:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $crt
  user:
    client-certificate: $PKI/$crt.crt
    client-key: $PKI/$crt.key
contexts:
- name: gpuext-k8slab
  context:
    cluster: gpuext-k8slab
    user: $crt
current-context: gpuext-k8slab
EOT
	chmod 0600 "$KCONF/$name.conf.tmp"
	mv "$KCONF/$name.conf.tmp" "$KCONF/$name.conf"
}

# --- processes -------------------------------------------------------------------

# start NAME ARGS...: run component NAME (a symlink to gpuext-kube) in the background.
start() {
	local name="$1"; shift
	mkdir -p "$LOGS" "$PIDS"
	if lab_pid_alive "$PIDS/$name.pid"; then
		return 0
	fi
	printf '\n=== %s %s\n' "$(date -u +%FT%TZ)" "$name" >> "$LOGS/$name.log"
	# setsid: out of the caller's process group and terminal; 9>&-: not the lock.
	setsid "$K8S_BIN/$name" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
	echo $! > "$PIDS/$name.pid"
}

# wait_for SECS NAME WHAT CMD...: CMD succeeds within SECS, or die with NAME's log tail.
wait_for() {
	local secs="$1" name="$2" what="$3"; shift 3
	if ! lab_wait "$secs" "$what" "$@"; then
		tail -n 30 "$LOGS/$name.log" >&2 || true
		lab_pid_alive "$PIDS/$name.pid" || die "$name exited (log $LOGS/$name.log)"
		die "$name: $what not within ${secs}s (log $LOGS/$name.log)"
	fi
}

# pid_running PID: PID runs (a zombie, not yet reaped by PID 1, does not).
pid_running() {
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	[[ "${stat:0:1}" != Z ]]
}

healthz() { curl -fsk --max-time 2 "https://127.0.0.1:$1/healthz" >/dev/null; }

# --- cgroups ---------------------------------------------------------------------

# make_cgroup_root: the kubelet wants its --cgroup-root in every hierarchy.
make_cgroup_root() {
	local root
	while read -r root; do
		mkdir -p "$root/$CGROUP_ROOT"
		# A new cpuset cgroup has no cpus or mems: give it the parent's.
		if [[ -f "$root/$CGROUP_ROOT/cpuset.cpus" && -z "$(cat "$root/$CGROUP_ROOT/cpuset.cpus")" ]]; then
			cat "$root/cpuset.cpus" > "$root/$CGROUP_ROOT/cpuset.cpus"
			cat "$root/cpuset.mems" > "$root/$CGROUP_ROOT/cpuset.mems"
		fi
	done < <(lab_cgroup_roots)
}

# --- up ----------------------------------------------------------------------------

# bind_device_plugin_dir: the kubelet serves its registration socket in
# /var/lib/kubelet/device-plugins whatever its --root-dir; that dir is the
# bind mount of <root-dir>/device-plugins, so that a DaemonSet given
# kubeletDir=<root-dir> finds both device-plugins/ and pod-resources/.
bind_device_plugin_dir() {
	mkdir -p "$KUBELET_ROOT/device-plugins" "$DEVICE_PLUGIN_DIR"
	# Ours while our kubelet runs; else a crashed cluster's: bind it anew.
	lab_pid_alive "$PIDS/kubelet.pid" && lab_mounts_under "$DEVICE_PLUGIN_DIR" | grep -q . && return 0
	lab_umount_under "$DEVICE_PLUGIN_DIR"
	[[ -z "$(ls -A "$DEVICE_PLUGIN_DIR")" ]] || die "$DEVICE_PLUGIN_DIR is not empty: another kubelet's? (not ours to clear)"
	mount --bind "$KUBELET_ROOT/device-plugins" "$DEVICE_PLUGIN_DIR"
}

write_kubelet_config() {
	cat > "$K8S_DIR/kubelet.yaml" <<EOT
# Written by test/k8s/cluster.sh; rewritten on every \`up\`.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: $CONTAINER_RUNTIME_ENDPOINT
imageServiceEndpoint: $IMAGE_SERVICE_ENDPOINT
# PID 1 is no systemd here, and the host's controllers are on cgroup v1.
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
# What a 2-core test machine cannot give: reserved cgroups, evictions, image GC
# (the lab's images are imported, never pulled back).
enforceNodeAllocatable: []
evictionHard: {}
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: $POD_LOGS
rotateCertificates: false
serverTLSBootstrap: false
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 5s
serializeImagePulls: false
maxPods: 50
EOT
}

# write_cni_config: containerd reports NetworkReady (so the node gets Ready)
# once its CNI conf dir holds a network. This one names a plugin that does not
# exist: host-network pods never call CNI, and any other pod's sandbox fails
# (FailedCreatePodSandBox: failed to find plugin "loopback", the first one
# containerd calls).
write_cni_config() {
	local dir="$GPUEXT_LAB_DIR/containerd/cni/net.d"
	mkdir -p "$dir"
	cat > "$dir/10-gpuext-k8slab.conflist" <<EOT
{
  "cniVersion": "1.0.0",
  "name": "gpuext-k8slab-host-network-only",
  "plugins": [{"type": "gpuext-k8slab-host-network-only"}]
}
EOT
}

cmd_up() {
	lab_require_root
	local b start=$SECONDS
	for b in gpuext-kube kube-apiserver kubelet kubectl helm etcd; do
		[[ -x "$K8S_BIN/$b" ]] || die "$K8S_BIN/$b missing: run test/k8s/install.sh (make deps)"
	done
	command -v openssl >/dev/null || die "openssl missing: run test/k8s/install.sh"
	command -v curl >/dev/null || die "curl missing: run test/k8s/install.sh"
	if [[ -s "$HOST_OWNER" && "$(cat "$HOST_OWNER")" != "$K8S_DIR" ]]; then
		local other
		other="$(cat "$HOST_OWNER")"
		if [[ -s "$other/pids/kubelet.pid" ]] && pid_running "$(cat "$other/pids/kubelet.pid")"; then
			die "another k8s lab cluster runs (work dir $other): GPUEXT_K8S_DIR=$other test/k8s/cluster.sh down"
		fi
	fi
	printf '%s\n' "$K8S_DIR" > "$HOST_OWNER"
	mkdir -p "$LOGS" "$PIDS" "$KUBELET_ROOT" "$POD_LOGS"

	# The runtime first: its env has the CRI endpoint the kubelet config names.
	write_cni_config
	containerd_sh up
	eval "$(containerd_sh env)"

	if lab_pid_alive "$PIDS/kube-apiserver.pid"; then
		read_ports || die "ports.env missing while the apiserver runs"
	else
		load_ports
	fi
	if ! lab_pid_alive "$PIDS/kube-apiserver.pid" \
		&& ss -Htanl | awk '{print $4}' | grep -qE "^($API_HOST|0\.0\.0\.0|\*|\[::\]):$API_PORT\$"; then
		die "$API_HOST:$API_PORT is taken: the apiserver must listen there (the kubernetes Service's address)"
	fi
	make_pki
	kubeconfig admin admin
	kubeconfig controller-manager controller-manager
	kubeconfig scheduler scheduler
	kubeconfig kubelet kubelet

	start etcd --name=gpuext-k8slab --data-dir="$K8S_DIR/etcd" \
		--listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="gpuext-k8slab=http://127.0.0.1:$ETCD_PEER_PORT" \
		--unsafe-no-fsync --quota-backend-bytes=1073741824 --log-level=warn
	wait_for 30 etcd "etcd /health" curl -fs --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"

	start kube-apiserver --v="$V" \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address="$API_HOST" --secure-port="$API_PORT" \
		--advertise-address="$API_HOST" --endpoint-reconciler-type=none \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=Hostname \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--allow-privileged=true --profiling=false
	wait_for 90 kube-apiserver "apiserver /readyz" kubectl get --raw /readyz

	start kube-controller-manager --v="$V" \
		--kubeconfig="$KCONF/controller-manager.conf" \
		--authentication-kubeconfig="$KCONF/controller-manager.conf" \
		--authorization-kubeconfig="$KCONF/controller-manager.conf" \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=true \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--leader-elect=false --profiling=false
	start kube-scheduler --v="$V" \
		--kubeconfig="$KCONF/scheduler.conf" \
		--authentication-kubeconfig="$KCONF/scheduler.conf" \
		--authorization-kubeconfig="$KCONF/scheduler.conf" \
		--bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
		--leader-elect=false --profiling=false

	make_cgroup_root
	bind_device_plugin_dir
	write_kubelet_config
	# PATH without /usr/sbin and /sbin: the kubelet finds no iptables and so
	# leaves the host's firewall alone (it would add KUBE-FIREWALL to INPUT and
	# OUTPUT, for kube-proxy, which does not run here). mount and umount are in /usr/bin.
	PATH=/usr/local/bin:/usr/bin:/bin start kubelet --v="$V" \
		--config="$K8S_DIR/kubelet.yaml" --kubeconfig="$KCONF/kubelet.conf" \
		--root-dir="$KUBELET_ROOT" --cert-dir="$KUBELET_ROOT/pki" \
		--hostname-override="$NODE"

	wait_for 60 kube-controller-manager "controller-manager /healthz" healthz "$KCM_PORT"
	wait_for 60 kube-scheduler "scheduler /healthz" healthz "$SCHED_PORT"
	wait_for 60 kubelet "kubelet /healthz" curl -fs --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
	wait_for 90 kubelet "node $NODE Ready" kubectl wait --for=condition=Ready "node/$NODE" --timeout=5s
	# Pods need the namespace's service account and the root CA config map
	# (the token volume) before the apiserver admits them.
	wait_for 60 kube-controller-manager "service account default/default" kubectl -n default get serviceaccount default
	wait_for 60 kube-controller-manager "config map default/kube-root-ca.crt" kubectl -n default get configmap kube-root-ca.crt
	log "cluster up in $(( SECONDS - start ))s: node $NODE Ready, apiserver https://$API_HOST:$API_PORT, KUBECONFIG=$KCONF/admin.conf"
}

# --- down --------------------------------------------------------------------------

cmd_down() {
	lab_require_root
	local c
	for c in "${COMPONENTS[@]}"; do
		if [[ -s "$PIDS/$c.pid" ]]; then
			log "stopping $c (pid $(cat "$PIDS/$c.pid"))"
		fi
		lab_stop_pid "$PIDS/$c.pid" 20
	done
	if [[ "$(cat "$HOST_OWNER" 2>/dev/null)" == "$K8S_DIR" ]]; then
		lab_umount_under "$DEVICE_PLUGIN_DIR"
		rmdir "$DEVICE_PLUGIN_DIR" /var/lib/kubelet 2>/dev/null || true
	fi
	# Pods, containers, shims, the runtime and its state (images included).
	containerd_sh clean
	lab_umount_under "$KUBELET_ROOT"
	local left
	left="$(lab_mounts_under "$K8S_DIR")"
	[[ -z "$left" ]] || lab_umount_under "$K8S_DIR"
	lab_rmdir_empty_cgroups "$CGROUP_ROOT"
	left="$(lab_leftover_cgroups "$CGROUP_ROOT")"
	[[ -z "$left" ]] || log "cgroups left (busy): $(tr '\n' ' ' <<<"$left")"
	left="$(lab_mounts_under "$K8S_DIR")"
	[[ -z "$left" ]] || log "still mounted: $left"
	if [[ -n "$left" ]]; then
		# rm -rf would follow a bind mount into the node's files.
		log "not removing the state under $K8S_DIR while something is mounted there"
		return 1
	fi
	rm -rf "$K8S_DIR/etcd" "$KUBELET_ROOT" "$POD_LOGS" "$K8S_DIR/helm" "$K8S_DIR/lab"
	[[ "$(cat "$HOST_OWNER" 2>/dev/null)" == "$K8S_DIR" ]] && rm -f "$HOST_OWNER"
	log "cluster down"
}

cmd_clean() {
	cmd_down
	log "removing $K8S_DIR"
	rm -rf "$K8S_DIR"
}

cmd_status() {
	local c
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
		if lab_pid_alive "$PIDS/$c.pid"; then
			echo "$c: running, pid $(cat "$PIDS/$c.pid")"
		else
			echo "$c: not running"
		fi
	done
	if lab_pid_alive "$PIDS/kube-apiserver.pid"; then
		kubectl get nodes -o wide || true
		kubectl get pods -A -o wide || true
	fi
	containerd_sh status || true
}

print_env() {
	read_ports || true
	cat <<EOT
export KUBECONFIG=$KCONF/admin.conf
export GPUEXT_K8S_DIR=$K8S_DIR
export GPUEXT_K8S_NODE=$NODE
export GPUEXT_K8S_KUBECTL=$KUBECTL
export GPUEXT_K8S_HELM=$HELM
export GPUEXT_K8S_APISERVER=https://$API_HOST:$API_PORT
export GPUEXT_K8S_CGROUP_ROOT=/$CGROUP_ROOT
export GPUEXT_K8S_KUBELET_ROOT=$KUBELET_ROOT
export GPUEXT_K8S_POD_LOG_DIR=$POD_LOGS
export GPUEXT_K8S_DEVICE_PLUGIN_DIR=$DEVICE_PLUGIN_DIR
export GPUEXT_K8S_LOG_DIR=$LOGS
export HELM_CACHE_HOME=$K8S_DIR/helm/cache
export HELM_CONFIG_HOME=$K8S_DIR/helm/config
export HELM_DATA_HOME=$K8S_DIR/helm/data
EOT
	# The runtime's: CONTAINERD_ADDRESS, NRI_SOCKET, GPUEXT_LAB_IMAGE, ...
	containerd_sh env
	echo "export GPUEXT_LAB_DIR=$GPUEXT_LAB_DIR"
}

# up, down and clean hold a lock on the work dir, so that two callers never
# start or stop the same cluster at once (daemons get 9>&-).
case "${1:-}" in
	up | down | clean)
		exec 9>"$K8S_DIR/cluster.lock"
		flock -w 300 9 || die "timed out waiting for $K8S_DIR/cluster.lock"
		;;
esac
case "${1:-}" in
	up) cmd_up ;;
	down) cmd_down ;;
	clean) cmd_clean ;;
	env) print_env ;;
	status) cmd_status ;;
	kubectl) shift; kubectl "$@" ;;
	helm) shift; helm "$@" ;;
	ctr) shift; containerd_sh ctr "$@" ;;
	*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
