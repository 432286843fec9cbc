#!/bin/sh
# render.sh: write the gpuext hooks.d files (oci-hooks(5)) for podman.
#
#   deploy/podman/render.sh HOOK_PATH CONFIG_PATH OUT_DIR
#
# HOOK_PATH   absolute path of gpuext-oci-hook (e.g. /usr/local/bin/gpuext-oci-hook)
# CONFIG_PATH absolute path of the gpuext config (e.g. /etc/gpuext/config.json)
# OUT_DIR     the hooks dir podman reads (default /usr/share/containers/oci/hooks.d;
#             podman --hooks-dir DIR or containers.conf hooks_dir for another)
#
# Writes OUT_DIR/gpuext.json (createRuntime: register the cgroup) and
# OUT_DIR/gpuext-poststop.json (poststop: remove it). One hooks.d file holds
# one hook command, and the stage is an argument of the command, hence two files.
set -eu
if [ "$#" -ne 3 ]; then
	sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
fi
hook="$1" config="$2" out="$3"
for p in "$hook" "$config"; do
	case "$p" in
	/*) ;;
	*) echo "render.sh: $p: want an absolute path" >&2; exit 2 ;;
	esac
	case "$p" in
	*'"'* | *'\'* | *'@'* | *'|'*) echo "render.sh: $p: unsupported character" >&2; exit 2 ;;
	esac
done
here="$(cd "$(dirname "$0")" && pwd -P)"
mkdir -p "$out"
for f in gpuext.json gpuext-poststop.json; do
	sed -e "s|@HOOK_PATH@|$hook|g" -e "s|@CONFIG_PATH@|$config|g" "$here/$f" > "$out/.$f.tmp"
	mv "$out/.$f.tmp" "$out/$f"
done
