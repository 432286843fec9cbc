# mps_tenant.sh - sourced by gpu-test.sh (section mps-control): a
# best-effort tenant cannot change the MPS control daemon's settings, nor
# its own SM share, through what admission gives it: the daemon's "control"
# socket alone (admission mounts that one entry of mpsPipeDirectory,
# internal/admission/injection.go) and the device runtime, which sets the
# share from the tenant's settings (devrt/lib/priority.c).
# Uses gpu-test.sh's ok/bad/info, want, $W, $OUT, $REPO, $LIB, $GPUEXTCTL
# and $W/apps_static. Its own daemon, in $W/mpst: it leaves the host's and
# the other sections' daemons alone. Issue 32, row 10.
# shellcheck shell=bash

mpst_checks() {
	local ctl=${MPS_CTL:-$(command -v nvidia-cuda-mps-control || true)}
	local gx=${GPUEXTCTL:-$REPO/bin/gpuextctl}
	local D="$W/mpst" R="$OUT/mps-tenant.txt"
	if [[ -z $ctl || ! -x $W/apps_static || ! -x $gx || ! -f $LIB ]]; then
		bad mps-tenant "needs nvidia-cuda-mps-control, apps_static, bin/gpuextctl and the device runtime"
		return
	fi
	rm -rf "$D" && mkdir -p "$D/pipe" "$D/log" "$D/view" "$D/tenant" "$D/acct"
	host() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_LOG_DIRECTORY="$D/log" timeout 10 "$ctl" 2>&1; }
	tenant_ctl() { echo "$*" | CUDA_MPS_PIPE_DIRECTORY="$D/view" timeout 10 "$ctl" 2>&1; }

	CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_LOG_DIRECTORY="$D/log" "$ctl" -d
	sleep 0.5
	# the host's settings, which the tenant must not move
	host set_default_active_thread_percentage 60 >/dev/null
	CUDA_MPS_PIPE_DIRECTORY="$D/pipe" "$W/apps_static" compute >/dev/null 2>&1 # starts a server
	local srv
	srv=$(host get_server_list | head -1)
	[[ -n $srv ]] && host set_active_thread_percentage "$srv" 50 >/dev/null
	local dflt0 srvpct0
	dflt0=$(host get_default_active_thread_percentage)
	srvpct0=$(host get_active_thread_percentage "$srv")

	# The tenant's view: the control socket alone (a hard link: the shape
	# of admission's per-file bind mount).
	ln "$D/pipe/control" "$D/view/control"
	# A best-effort tenant with a 40% share, as admission writes it.
	"$gx" settings write --dir "$D/tenant" --tenant 9 --policy mps-tenant --class best-effort --sm-percent 40 >/dev/null
	local env=(LD_PRELOAD="$LIB" GPUEXT_TENANT_ID=9 GPUEXT_TENANT_DIR="$D/tenant" GPUEXT_TENANT_CONFIG="$D/tenant/config.json"
		GPUEXT_TENANT_ACCT="$D/acct" CUDA_MPS_PIPE_DIRECTORY="$D/view" GPUEXT_DEVRT_DEBUG=1)

	{
		echo "== host: default $dflt0%, server $srv at $srvpct0%"
		# 1. The daemon's settings, through the tenant's socket: with the
		# control tool, and as raw command lines written to the socket.
		for cmd in "set_default_active_thread_percentage 100" "set_active_thread_percentage $srv 100" \
			"set_default_client_priority 0" "set_default_device_pinned_mem_limit 0 1G" "terminate $srv" "quit"; do
			echo "== tenant through its view: $cmd"
			tenant_ctl "$cmd"
			python3 - "$D/view/control" "$cmd" <<'PY' 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect(sys.argv[1])
    s.sendall(sys.argv[2].encode() + b"\n")
    print("raw answer:", s.recv(4096)[:200])
except Exception as e:
    print("raw:", type(e).__name__, e)
PY
		done
		sleep 1
		# 2. Its own share: the tenant asks for all the SMs in its env; the
		# device runtime keeps it at the policy's 40%.
		echo "== tenant app asking CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"
		env "${env[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 "$W/apps_static" compute 2>&1
	} >"$R" 2>&1

	local dflt1 srvpct1 alive=no list1
	srvpct1=$(host get_active_thread_percentage "$srv")
	# 3. The same command from a tenant that is not root (uid 65534, as a
	# container with a user set or a user namespace runs): through a view
	# it can reach, it must see the server (else the check proves nothing)
	# and must not move its share. The root tenant's result is kept apart.
	local nv nr_list nr_pct
	nv=$(mktemp -d /tmp/gpuext-mpsview.XXXX) && chmod 0755 "$nv" && ln "$D/pipe/control" "$nv/control"
	host set_active_thread_percentage "$srv" 50 >/dev/null
	nonroot_ctl() { echo "$*" | setpriv --reuid=65534 --regid=65534 --clear-groups env CUDA_MPS_PIPE_DIRECTORY="$nv" timeout 10 "$ctl" 2>&1; }
	{
		echo "== as uid 65534 through a view of the control socket: get_server_list"; nr_list=$(nonroot_ctl get_server_list); echo "$nr_list"
		echo "== as uid 65534: set_active_thread_percentage $srv 10"; nonroot_ctl set_active_thread_percentage "$srv" 10
	} >>"$R" 2>&1
	nr_pct=$(host get_active_thread_percentage "$srv")
	echo "== host after the uid 65534 tenant: server $srv at $nr_pct%" >>"$R"
	rm -rf "$nv"
	unset -f nonroot_ctl
	if ! grep -qw "$srv" <<<"$nr_list"; then
		bad mps-tenant-nonroot-server-share "uid 65534 could not reach the daemon through the view (get_server_list: '$(head -c 200 <<<"$nr_list")'): the check proves nothing (mps-tenant.txt)"
	elif [[ $nr_pct == 50.0 ]]; then
		ok "mps-tenant-nonroot-server-share (uid 65534 sees server $srv but cannot move its share: 50.0%)"
	else
		bad mps-tenant-nonroot-server-share "uid 65534 moved server $srv from 50.0% to $nr_pct% (mps-tenant.txt)"
	fi
	list1=$(host get_server_list)
	[[ -n $list1 ]] && alive=yes
	dflt1=$(host get_default_active_thread_percentage)
	{
		echo "== host after: default $dflt1%, server $srv at $srvpct1%, servers: $list1"
		echo "== server log (tail)"; tail -n 20 "$D/log/server.log"
		echo "== control log (tail)"; tail -n 20 "$D/log/control.log"
	} >>"$R" 2>&1
	host quit >/dev/null
	sleep 1
	cat "$R"

	if [[ -n $srv && $alive == yes && $dflt1 == "$dflt0" && $srvpct1 == "$srvpct0" ]] && grep -qw "$srv" <<<"$list1"; then
		ok "mps-tenant-daemon-settings (set_*, terminate and quit through the tenant's control socket change nothing: default $dflt1%, server $srv at $srvpct1%)"
	else
		bad mps-tenant-daemon-settings "before: default $dflt0% server '$srv' at $srvpct0%; after: default $dflt1% server at $srvpct1%, alive=$alive servers='$list1' (mps-tenant.txt)"
	fi
	if grep -q 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40' "$R" && grep -q 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 is not within' "$R" &&
		grep -q '^checksum' "$R"; then
		ok "mps-tenant-own-share (asking for 100% in its env, the tenant's client runs at its policy's 40%)"
	else
		bad mps-tenant-own-share "no 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40' from the device runtime, or the app failed (mps-tenant.txt)"
	fi
	unset -f host tenant_ctl
}

if want mps-control; then
	mpst_checks
fi
