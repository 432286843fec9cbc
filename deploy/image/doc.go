// Command image builds the gpuext agent's container image from what
// `make build` wrote into bin/: the static binaries (gpuext-nri-plugin,
// gpuext-oci-hook, gpuext-runc, gpuextctl) and the device runtime
// (devrt/libgpuext-devrt.so), with no base image. It writes an OCI image
// layout archive (oci-layout, index.json, blobs/sha256) that
// `ctr images import` and other OCI tools load:
//
//	go run ./deploy/image --bin bin --name localhost/gpuext:v1 --out bin/gpuext-image.tar
//
// The archive is reproducible: the same inputs (file bytes, flags) give the
// same bytes and the same manifest digest. Tars list their entries sorted,
// with mtime 0, uid and gid 0 and fixed modes; gzip has no name or time;
// the config's created time is --created or SOURCE_DATE_EPOCH, else the
// Unix epoch. A binary that is not a static ELF of the image's architecture
// is refused (the image has no libc and no loader to run it).
//
// Layout of the image: /usr/local/bin/<binary>,
// /usr/lib/gpuext/devrt/libgpuext-devrt.so (what `gpuextctl setup-node`
// installs on the host), /etc/passwd and /etc/group with root, /tmp.
// Entrypoint: gpuext-nri-plugin.
package main
