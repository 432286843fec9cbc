/*
 * gpuext_devrt_maps.h - the .maps file, defined once.
 *
 * The interposer (devrt/lib/probe_copyout.c) copies a patched image's device-probe
 * maps out of GPU memory into $GPUEXT_TENANT_ACCT/probes/<pid>-<image>.maps;
 * the host (devrt/probefiles/maps, whose layout_gen.go is generated from this
 * header) decodes it. The file is written by the tenant's processes and read
 * by root: the reader checks every size here before it uses it.
 *
 *   struct gpuext_devrt_maps_header
 *   nmaps times: struct gpuext_devrt_maps_entry, then, when bytes is not 0,
 *                the map symbol's bytes (the 32-byte struct gpuext_dmap
 *                descriptor of gpuext_abi.h, then its data), zero padded to 8
 *
 * All fields are fixed width, little-endian (x86-64, aarch64), naturally
 * aligned.
 */
#ifndef GPUEXT_DEVRT_MAPS_H
#define GPUEXT_DEVRT_MAPS_H

#include <stdint.h>

#define GPUEXT_DEVRT_MAPS_MAGIC "GXPMAPS\0" /* the 8 bytes of magic[], the last one NUL */
#define GPUEXT_DEVRT_MAPS_VERSION 1u
#define GPUEXT_DEVRT_MAPS_NAME_SIZE 64u /* a name is at most 63 bytes, NUL padded */
#define GPUEXT_DEVRT_MAPS_MAX_MAPS 64u  /* maps in one file; module.conf holds no more */

struct gpuext_devrt_maps_header {
	char magic[8];      /* GPUEXT_DEVRT_MAPS_MAGIC */
	uint32_t version;   /* GPUEXT_DEVRT_MAPS_VERSION */
	uint32_t pid;       /* the process's key (probe_load.c gx_key) */
	uint32_t image;     /* image index in the process */
	uint32_t nmaps;     /* entries that follow, at most GPUEXT_DEVRT_MAPS_MAX_MAPS */
	uint64_t seq;       /* copy sequence number: 1, 2, ... per image */
	uint64_t time_ns;   /* CLOCK_REALTIME of the copy */
	uint32_t tenant_id; /* from the tenant config */
	uint32_t final;     /* 1: the copy at process exit */
};

struct gpuext_devrt_maps_entry {
	char name[GPUEXT_DEVRT_MAPS_NAME_SIZE]; /* the map's name, NUL padded */
	uint64_t bytes;                         /* the symbol's size; 0: the image has no such symbol */
};

_Static_assert(sizeof(struct gpuext_devrt_maps_header) == 48, "maps header layout");
_Static_assert(sizeof(struct gpuext_devrt_maps_entry) == 72, "maps entry layout");
_Static_assert(sizeof(GPUEXT_DEVRT_MAPS_MAGIC) == 8 + 1, "magic is 8 bytes");

#endif /* GPUEXT_DEVRT_MAPS_H */
