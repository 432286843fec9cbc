#!/usr/bin/env bash
# image.sh: build the lab's container images from busybox-static, offline.
#
#   test/lab/image.sh            # (re)build into $LAB_DIR/images, print the paths
#
# Outputs (all deterministic: same busybox -> same digests):
#   $LAB_DIR/images/busybox-oci.tar   OCI image layout archive, named
#                                     localhost/gpuext-busybox:lab (ctr import)
#   $LAB_DIR/images/pause-oci.tar     OCI archive localhost/gpuext-pause:lab, the
#                                     CRI sandbox image (a shell that sleeps)
#   $LAB_DIR/images/rootfs.tar        plain rootfs tar (docker import, podman import)
#   $LAB_DIR/images/hostfs-oci.tar    OCI archive localhost/gpuext-hostfs:lab: no
#                                     programs, only the directories and usr-merge
#                                     links a container needs to run the host's
#                                     /usr and /opt mounted read-only (the GPU
#                                     node's containers, test/gpu-node); /lib64
#                                     and /bin are real, writable directories, so
#                                     that CDI can mount the driver's files there
#
# Needs only coreutils, tar and /bin/busybox (package busybox-static).
# Env: GPUEXT_LAB_DIR, GPUEXT_LAB_BUSYBOX (default: the static busybox from PATH).
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUSYBOX="${GPUEXT_LAB_BUSYBOX:-$(command -v busybox || true)}"
[[ -x "$BUSYBOX" ]] || lab_die "busybox not found (run test/lab/install-deps.sh)"
# A dynamic busybox would need its libc inside the image.
if ! LC_ALL=C file -b "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' \
	&& ldd "$BUSYBOX" >/dev/null 2>&1; then
	lab_die "$BUSYBOX is dynamically linked; install busybox-static"
fi

OUT="$LAB_DIR/images"
WORK="$OUT/build"
rm -rf "$WORK"
mkdir -p "$WORK"

case "$(uname -m)" in
	x86_64) ARCH=amd64 ;;
	aarch64) ARCH=arm64 ;;
	*) ARCH="$(uname -m)" ;;
esac

# --- rootfs -----------------------------------------------------------------
ROOTFS="$WORK/rootfs"
mkdir -p "$ROOTFS"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,root,run,var/tmp}
chmod 1777 "$ROOTFS/tmp" "$ROOTFS/var/tmp"
install -m 0755 "$BUSYBOX" "$ROOTFS/bin/busybox"
while read -r applet; do
	[[ -n "$applet" && "$applet" != bin/busybox ]] || continue
	[[ -e "$ROOTFS/$applet" || -L "$ROOTFS/$applet" ]] && continue
	ln -s /bin/busybox "$ROOTFS/$applet"
done < <("$BUSYBOX" --list-full)
# sh must exist even if the applet list names it elsewhere.
[[ -e "$ROOTFS/bin/sh" ]] || ln -s /bin/busybox "$ROOTFS/bin/sh"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$ROOTFS/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$ROOTFS/etc/group"
printf 'gpuext-lab\n' > "$ROOTFS/etc/hostname"
: > "$ROOTFS/etc/resolv.conf"
: > "$ROOTFS/etc/hosts"

# Reproducible tar: sorted names, fixed owner and time.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
	-C "$ROOTFS" -cf "$WORK/rootfs.tar" .

# --- OCI image layout ----------------------------------------------------------
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# put_blob FILE: move FILE into the layout's blob store, print its digest.
put_blob() {
	local layout="$1" file="$2" d
	d="$(sha "$file")"
	mkdir -p "$layout/blobs/sha256"
	cp "$file" "$layout/blobs/sha256/$d"
	printf '%s\n' "$d"
}

# json_array ITEM...: a JSON array of strings (items must not hold " or \).
json_array() {
	local out="" s
	for s in "$@"; do out+="${out:+,}\"$s\""; done
	printf '[%s]' "$out"
}

# build_oci NAME OUTPUT.tar CMD...: an OCI archive with the rootfs layer.
build_oci() {
	local name="$1" output="$2"; shift 2
	local layout
	layout="$WORK/oci-$(basename "$output" .tar)"
	rm -rf "$layout"
	mkdir -p "$layout"
	local layer_digest layer_size config_digest config_size manifest_digest manifest_size
	layer_digest="$(put_blob "$layout" "${LAYER:-$WORK/rootfs.tar}")"
	layer_size="$(size "${LAYER:-$WORK/rootfs.tar}")"

	printf '{"created":"1970-01-01T00:00:00Z","architecture":"%s","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"test/lab/image.sh"}]}' \
		"$ARCH" "$(json_array "$@")" "$layer_digest" > "$WORK/config.json"
	config_digest="$(put_blob "$layout" "$WORK/config.json")"
	config_size="$(size "$WORK/config.json")"

	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
		"$config_digest" "$config_size" "$layer_digest" "$layer_size" > "$WORK/manifest.json"
	manifest_digest="$(put_blob "$layout" "$WORK/manifest.json")"
	manifest_size="$(size "$WORK/manifest.json")"

	printf '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
	# io.containerd.image.name gives ctr import the full name; ref.name is the tag.
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
		"$manifest_digest" "$manifest_size" "$ARCH" "$name" "${name##*:}" > "$layout/index.json"

	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
		-C "$layout" -cf "$output.tmp" oci-layout index.json blobs
	mv "$output.tmp" "$output"
}

build_oci "$LAB_IMAGE" "$OUT/busybox-oci.tar" /bin/sh
# The sandbox ("pause") process: a shell that sleeps and exits on SIGTERM.
build_oci "$LAB_PAUSE_IMAGE" "$OUT/pause-oci.tar" \
	/bin/sh -c "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done"
# The GPU node's image: the host's /usr and /opt are mounted over it.
HOSTFS="$WORK/hostfs"
mkdir -p "$HOSTFS"/{bin,lib,lib64,usr,opt,etc,proc,sys,dev,tmp,root,run,var/tmp,gpuext-test,res}
chmod 1777 "$HOSTFS/tmp" "$HOSTFS/var/tmp"
ln -s usr/sbin "$HOSTFS/sbin"
ln -s /usr/lib/x86_64-linux-gnu "$HOSTFS/lib/x86_64-linux-gnu"
ln -s /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$HOSTFS/lib64/ld-linux-x86-64.so.2"
for b in sh bash env true sleep cat ls; do ln -s "/usr/bin/$b" "$HOSTFS/bin/$b"; done
cp "$ROOTFS/etc/passwd" "$ROOTFS/etc/group" "$ROOTFS/etc/hostname" "$ROOTFS/etc/resolv.conf" "$ROOTFS/etc/hosts" "$HOSTFS/etc/"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$HOSTFS" -cf "$WORK/hostfs.tar" .
LAYER="$WORK/hostfs.tar" build_oci "$LAB_HOSTFS_IMAGE" "$OUT/hostfs-oci.tar" /bin/sh
mv "$WORK/rootfs.tar" "$OUT/rootfs.tar"
rm -rf "$WORK"

lab_log "images: $OUT/busybox-oci.tar ($LAB_IMAGE), $OUT/pause-oci.tar ($LAB_PAUSE_IMAGE), $OUT/hostfs-oci.tar ($LAB_HOSTFS_IMAGE), $OUT/rootfs.tar"
