#!/usr/bin/env bash
# cri.sh: run one-container pods on the lab containerd through CRI (so NRI sees them).
#
#   test/lab/cri.sh run [-p KEY=VAL]... [-a KEY=VAL]... [-l KEY=VAL]... [-e KEY=VAL]... [-d CDI]... [-r HANDLER] NAME SCRIPT
#       Create pod NAME (host network, cgroup parent /kubepods/besteffort/pod<uid>)
#       and container NAME running `sh -c SCRIPT`, start it, print "POD_ID CTR_ID".
#       -p: pod annotation, -a: container annotation, -l: container label,
#       -e: container env, -d: CDI device (vendor/class=name, CRI CDI_devices, as
#       the kubelet passes a device plugin's), -r: CRI runtime handler (e.g.
#       gpuext, see GPUEXT_RUNC_WRAPPER in containerd.sh).
#   test/lab/cri.sh logs CTR_ID        container output so far
#   test/lab/cri.sh wait CTR_ID [SECS] wait until the container exited, print its exit code
#   test/lab/cri.sh pid CTR_ID         host pid of the container's init process
#   test/lab/cri.sh rm POD_ID          stop and remove the pod and its containers
#   test/lab/cri.sh render [FLAGS] NAME UID SCRIPT   print the pod.json and ctr.json run would use
#
# The pod spec is test/lab/testdata/pod.json, the container spec ctr.json.
# Container logs: $LAB_DIR/containerd/pods/NAME/NAME.log.
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
eval "$("$LAB_SCRIPTS/containerd.sh" env)"

crictl() { "$GPUEXT_LAB_CRICTL" --config "$CRI_CONFIG_FILE" "$@"; }

# json_string S: S as the inside of a JSON string.
json_string() {
	local s="$1"
	s="${s//\\/\\\\}"
	s="${s//\"/\\\"}"
	s="${s//$'\n'/\\n}"
	s="${s//$'\t'/\\t}"
	printf '%s' "$s"
}

# add_map_entries TEXT KEY KV...: put "k": "v" pairs first into the map opened
# by the first line holding "KEY": {, dropping template entries with the same k.
add_map_entries() {
	local text="$1" key="$2"; shift 2
	(( $# > 0 )) || { printf '%s' "$text"; return; }
	local kv entries="" keys=()
	for kv in "$@"; do
		keys+=("\"$(json_string "${kv%%=*}")\":")
		entries+="    \"$(json_string "${kv%%=*}")\": \"$(json_string "${kv#*=}")\","$'\n'
	done
	local out="" line state=before k trimmed drop
	while IFS= read -r line; do
		trimmed="${line#"${line%%[![:space:]]*}"}"
		case "$state" in
			before)
				out+="$line"$'\n'
				if [[ "$line" == *"\"$key\": {"* ]]; then
					out+="$entries"
					state=inside
				fi
				;;
			inside)
				if [[ "$trimmed" == "}"* ]]; then
					# The map's last entry must not end with a comma.
					out="${out%,$'\n'}"$'\n'
					out+="$line"$'\n'
					state=after
					continue
				fi
				drop=0
				for k in "${keys[@]}"; do
					[[ "$trimmed" == "$k"* ]] && drop=1
				done
				(( drop )) || out+="$line"$'\n'
				;;
			after) out+="$line"$'\n' ;;
		esac
	done <<< "$text"
	printf '%s' "$out"
}

POD_ANN=() CTR_ANN=() CTR_LABELS=() CTR_ENV=() CTR_CDI=() HANDLER=""

# insert_before TEXT MARKER INSERT: TEXT with INSERT put before its first MARKER.
insert_before() {
	local text="$1" marker="$2" ins="$3"
	[[ "$text" == *"$marker"* ]] || lab_die "template has no $marker"
	printf '%s' "${text%%"$marker"*}$ins$marker${text#*"$marker"}"
}

# add_envs TEXT KV...: put {"key": k, "value": v} first into the "envs" list.
add_envs() {
	local text="$1"; shift
	(( $# > 0 )) || { printf '%s' "$text"; return; }
	local kv entries=""
	for kv in "$@"; do
		entries+="{ \"key\": \"$(json_string "${kv%%=*}")\", \"value\": \"$(json_string "${kv#*=}")\" },"$'\n'"    "
	done
	insert_before "$text" '{ "key": "GPUEXT_LAB"' "$entries"
}

# add_cdi TEXT NAME...: the container's CDI_devices (none: the field is left out).
add_cdi() {
	local text="$1"; shift
	(( $# > 0 )) || { printf '%s' "$text"; return; }
	local name list=""
	for name in "$@"; do
		list+="${list:+, }{ \"name\": \"$(json_string "$name")\" }"
	done
	insert_before "$text" '"log_path":' "\"CDI_devices\": [$list],"$'\n'"  "
}

render_pod() {
	local name="$1" uid="$2" t
	t="$(cat "$LAB_SCRIPTS/testdata/pod.json")"
	t="${t//@NAME@/"$(json_string "$name")"}"
	t="${t//@UID@/"$uid"}"
	t="${t//@LOG_DIR@/"$(json_string "$GPUEXT_LAB_POD_LOG_DIR/$name")"}"
	add_map_entries "$t" annotations ${POD_ANN[@]+"${POD_ANN[@]}"}
}

render_ctr() {
	local name="$1" script="$2" t
	t="$(cat "$LAB_SCRIPTS/testdata/ctr.json")"
	t="${t//@CTR_NAME@/"$(json_string "$name")"}"
	t="${t//@IMAGE@/"$GPUEXT_LAB_IMAGE"}"
	t="${t//@SCRIPT@/"$(json_string "$script")"}"
	t="$(add_map_entries "$t" annotations ${CTR_ANN[@]+"${CTR_ANN[@]}"})"
	t="$(add_envs "$t" ${CTR_ENV[@]+"${CTR_ENV[@]}"})"
	t="$(add_cdi "$t" ${CTR_CDI[@]+"${CTR_CDI[@]}"})"
	add_map_entries "$t" labels ${CTR_LABELS[@]+"${CTR_LABELS[@]}"}
}

parse_flags() {
	local opt
	OPTIND=1
	while getopts "p:a:l:e:d:r:" opt; do
		case "$opt" in
			p) POD_ANN+=("$OPTARG") ;;
			a) CTR_ANN+=("$OPTARG") ;;
			l) CTR_LABELS+=("$OPTARG") ;;
			e) CTR_ENV+=("$OPTARG") ;;
			d) CTR_CDI+=("$OPTARG") ;;
			r) HANDLER="$OPTARG" ;;
			*) exit 2 ;;
		esac
	done
}

cmd_run() {
	parse_flags "$@"
	shift $((OPTIND - 1))
	(( $# == 2 )) || lab_die "usage: cri.sh run [-p K=V] [-a K=V] [-l K=V] [-e K=V] [-d CDI] [-r HANDLER] NAME SCRIPT"
	local name="$1" script="$2" uid tmp pod ctr
	uid="$(cat /proc/sys/kernel/random/uuid)"
	tmp="$(mktemp -d)"
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	mkdir -p "$GPUEXT_LAB_POD_LOG_DIR/$name"
	render_pod "$name" "$uid" > "$tmp/pod.json"
	render_ctr "$name" "$script" > "$tmp/ctr.json"
	pod="$(crictl runp ${HANDLER:+--runtime "$HANDLER"} "$tmp/pod.json")"
	ctr="$(crictl create "$pod" "$tmp/ctr.json" "$tmp/pod.json")"
	crictl start "$ctr" >/dev/null
	printf '%s %s\n' "$pod" "$ctr"
}

cmd_wait() {
	local id="$1" secs="${2:-30}" state
	local deadline=$(( SECONDS + secs ))
	while :; do
		state="$(crictl inspect -o go-template --template '{{.status.state}} {{.status.exitCode}}' "$id")"
		if [[ "$state" == CONTAINER_EXITED* ]]; then
			echo "${state#* }"
			return 0
		fi
		(( SECONDS < deadline )) || lab_die "container $id still ${state%% *} after ${secs}s"
		sleep 0.2
	done
}

case "${1:-}" in
	run) shift; cmd_run "$@" ;;
	logs) crictl logs "$2" ;;
	wait) cmd_wait "$2" "${3:-30}" ;;
	pid) crictl inspect -o go-template --template '{{.info.pid}}' "$2"; echo ;;
	rm)
		crictl stopp "$2" >/dev/null
		crictl rmp -f "$2" >/dev/null
		;;
	render)
		shift
		parse_flags "$@"
		shift $((OPTIND - 1))
		render_pod "$1" "$2"
		render_ctr "$1" "$3"
		;;
	*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
