/*
 * fatbin.c - finds the PTX in a CUDA image (see fatbin.h) for the
 * device-probe patcher.
 *
 * Container layout (little-endian), as public descriptions of the format
 * give it and nvcc output confirms:
 *   wrapper   u32 magic 0x466243b1, u32 version (1, 2 for -rdc prelinked),
 *             u64 pointer to the container, u64 pointer (filename / fatbins)
 *   container u32 magic 0xBA55ED50, u16 version (1), u16 header size (16),
 *             u64 body size; the body is a run of entries
 *   nvcc 13 puts a container with a code-less cubin (a link helper) in
 *             front of the translation unit's container; other units'
 *             containers may follow in memory, so only the unit's one is read
 *   entry     u16 kind (1 PTX, 2 ELF), u16 (0x0101), u32 entry header size
 *             (64, larger with extensions), u64 padded payload size,
 *             u32 payload size (the compressed size when compressed),
 *             ... u32 arch at 28 ..., u64 flags at 40 (0x2000 LZ4,
 *             0x8000 zstd), u64 uncompressed size at 56; the payload
 *             follows the entry header; the next entry follows the padding.
 * Compressed PTX is decompressed with the system's liblz4.so.1 /
 * libzstd.so.1 when the process can load them (by soname, never by path);
 * otherwise the image is reported unpatchable.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"

#define GX_FATBIN_MAX_SIZE (1ull << 32)    /* sanity bound on a declared container size */
#define GX_PTX_MAX_UNCOMPRESSED (1ull << 30)

static uint16_t rd16(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t rd64(const unsigned char *p)
{
	return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}

const char *gx_image_kind_name(enum gx_image_kind k)
{
	switch (k) {
	case GX_IMAGE_WRAPPER:
		return "wrapper";
	case GX_IMAGE_FATBIN:
		return "fatbin";
	case GX_IMAGE_PTX:
		return "ptx";
	case GX_IMAGE_ELF:
		return "cubin";
	default:
		return "unknown";
	}
}

void gx_image_release(struct gx_image *img)
{
	free(img->owned);
	img->owned = NULL;
	img->ptx = NULL;
}

static int looks_like_ptx(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	return (s[0] == '/' && (s[1] == '/' || s[1] == '*')) || strncmp(s, ".version", 8) == 0;
}

/* Decompresses one payload with the system library, by soname; NULL with reason on failure. */
static char *decompress(const unsigned char *src, size_t n, uint64_t flags, uint64_t out_size, char *reason,
			size_t rlen)
{
	char *dst;

	if (!out_size || out_size > GX_PTX_MAX_UNCOMPRESSED) {
		snprintf(reason, rlen, "compressed-ptx:bad-size");
		return NULL;
	}
	dst = malloc(out_size + 1);
	if (!dst) {
		snprintf(reason, rlen, "out-of-memory");
		return NULL;
	}
	if (flags & GX_FATBIN_FLAG_ZSTD) {
		typedef size_t (*zd_fn)(void *, size_t, const void *, size_t);
		typedef unsigned (*ze_fn)(size_t);
		typedef size_t (*zf_fn)(const void *, size_t);
		void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
		zd_fn zd = h ? (zd_fn)dlsym(h, "ZSTD_decompress") : NULL;
		ze_fn ze = h ? (ze_fn)dlsym(h, "ZSTD_isError") : NULL;
		zf_fn zf = h ? (zf_fn)dlsym(h, "ZSTD_findFrameCompressedSize") : NULL;
		size_t r;

		if (!zd || !ze) {
			snprintf(reason, rlen, "compressed-ptx:zstd-unavailable");
			free(dst);
			return NULL;
		}
		/* the payload is padded to 8 bytes: decompress exactly the frame */
		if (zf && !ze(r = zf(src, n)) && r <= n)
			n = r;
		r = zd(dst, out_size, src, n);
		if (ze(r) || r != out_size) {
			snprintf(reason, rlen, "compressed-ptx:zstd-failed");
			free(dst);
			return NULL;
		}
	} else {
		typedef int (*lz_fn)(const char *, char *, int, int);
		void *h = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
		lz_fn lz = h ? (lz_fn)dlsym(h, "LZ4_decompress_safe") : NULL;
		int r;

		if (!lz) {
			snprintf(reason, rlen, "compressed-ptx:lz4-unavailable");
			free(dst);
			return NULL;
		}
		if (n > 0x7fffffffu || out_size > 0x7fffffffu) {
			snprintf(reason, rlen, "compressed-ptx:too-large");
			free(dst);
			return NULL;
		}
		r = lz((const char *)src, dst, (int)n, (int)out_size);
		if (r < 0 || (uint64_t)r != out_size) {
			snprintf(reason, rlen, "compressed-ptx:lz4-failed");
			free(dst);
			return NULL;
		}
	}
	dst[out_size] = 0;
	return dst;
}

/* A container header we can trust: its size, or 0. */
static uint64_t container_size(const unsigned char *c)
{
	uint64_t body;

	if (rd32(c) != GX_FATBIN_MAGIC || rd16(c + 6) < 16 || (body = rd64(c + 8)) > GX_FATBIN_MAX_SIZE)
		return 0;
	return rd16(c + 6) + body;
}

/*
 * A container holding only cubins without code (no ".text." section): what
 * CUDA 13's nvcc puts in front of a translation unit's real container (a
 * relocation/link helper). -1: cannot tell (compressed, no decompressor).
 */
static int container_is_helper(const unsigned char *c, uint64_t size, char *reason, size_t rlen)
{
	int entries = 0;

	for (uint64_t off = rd16(c + 6); off + GX_FATBIN_ENTRY_MIN <= size;) {
		const unsigned char *e = c + off;
		uint32_t hsize = rd32(e + 4);
		uint64_t padded = rd64(e + 8), flags = rd64(e + 40), usize = rd64(e + 56), psize = rd32(e + 16);
		const unsigned char *payload = e + hsize;
		int code;

		if (hsize < GX_FATBIN_ENTRY_MIN || off + hsize + padded > size || rd16(e) != GX_FATBIN_KIND_ELF)
			return 0;
		if (flags & (GX_FATBIN_FLAG_LZ4 | GX_FATBIN_FLAG_ZSTD)) {
			char *d;

			if (usize > (1u << 20))
				return 0; /* a helper is small */
			d = decompress(payload, psize && psize <= padded ? psize : padded, flags, usize, reason, rlen);
			if (!d)
				return -1;
			code = memmem(d, usize, ".text.", 6) != NULL;
			free(d);
		} else {
			code = memmem(payload, padded, ".text.", 6) != NULL;
		}
		if (code)
			return 0;
		entries++;
		off += hsize + padded;
	}
	return entries > 0;
}

static int inspect_container(const unsigned char *fb, int max_arch, struct gx_image *img)
{
	uint64_t body, off;
	const unsigned char *best = NULL;
	uint64_t best_flags = 0, best_len = 0, best_usize = 0;
	int best_arch = -1, too_new = 0;

	if (rd32(fb) != GX_FATBIN_MAGIC) {
		snprintf(img->reason, sizeof(img->reason), "unknown-image");
		return -1;
	}
	if (rd16(fb + 6) < 16 || (body = rd64(fb + 8)) > GX_FATBIN_MAX_SIZE) {
		snprintf(img->reason, sizeof(img->reason), "fatbin:bad-header");
		return -1;
	}
	img->fatbin_size = rd16(fb + 6) + body;
	for (off = rd16(fb + 6); off + GX_FATBIN_ENTRY_MIN <= img->fatbin_size;) {
		const unsigned char *e = fb + off;
		uint32_t kind = rd16(e), hsize = rd32(e + 4), arch = rd32(e + 28);
		uint64_t padded = rd64(e + 8), psize = rd32(e + 16), flags = rd64(e + 40), usize = rd64(e + 56);
		int compressed = (flags & (GX_FATBIN_FLAG_LZ4 | GX_FATBIN_FLAG_ZSTD)) != 0;

		if (hsize < GX_FATBIN_ENTRY_MIN || off + hsize + padded > img->fatbin_size) {
			snprintf(img->reason, sizeof(img->reason), "fatbin:bad-entry@%llu", (unsigned long long)off);
			return -1;
		}
		if (kind == GX_FATBIN_KIND_PTX) {
			img->n_ptx++;
			img->n_ptx_compressed += compressed;
			if (max_arch > 0 && (int)arch > max_arch)
				too_new++;
			else if ((int)arch > best_arch) {
				best = e + hsize;
				best_arch = (int)arch;
				best_flags = flags;
				best_len = compressed ? (psize && psize <= padded ? psize : padded) : padded;
				best_usize = usize;
			}
		} else if (kind == GX_FATBIN_KIND_ELF) {
			img->n_elf++;
		}
		off += hsize + padded;
	}
	if (!best) {
		if (too_new)
			snprintf(img->reason, sizeof(img->reason), "ptx-newer-than-device:sm_%d", max_arch);
		else
			snprintf(img->reason, sizeof(img->reason), img->n_elf ? "sass-only" : "fatbin:no-ptx");
		return -1;
	}
	img->ptx_arch = best_arch;
	if (best_flags & (GX_FATBIN_FLAG_LZ4 | GX_FATBIN_FLAG_ZSTD)) {
		img->ptx_was_compressed = 1;
		img->owned = decompress(best, best_len, best_flags, best_usize, img->reason, sizeof(img->reason));
		if (!img->owned)
			return -1;
		img->ptx = img->owned;
		img->ptx_len = strlen(img->owned);
	} else {
		img->ptx = (const char *)best;
		img->ptx_len = strnlen((const char *)best, best_len);
	}
	if (!looks_like_ptx(img->ptx) && !(img->ptx_len && img->ptx[0] == '.')) {
		snprintf(img->reason, sizeof(img->reason), "fatbin:ptx-entry-not-text");
		gx_image_release(img);
		return -1;
	}
	return 0;
}

/*
 * The image's containers: leading helper containers (see container_is_helper)
 * are skipped and the next container is the translation unit's. Nothing past
 * that is read: containers of other translation units may follow in memory.
 */
static int inspect_region(const unsigned char *fb, int max_arch, struct gx_image *img)
{
	const unsigned char *c = fb;
	uint64_t size;
	int r;

	for (int n = 0; n < 4; n++) {
		if (!(size = container_size(c))) {
			snprintf(img->reason, sizeof(img->reason), n ? "fatbin:helper-only" : "fatbin:bad-header");
			return -1;
		}
		r = container_is_helper(c, size, img->reason, sizeof(img->reason));
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		c += size;
	}
	r = inspect_container(c, max_arch, img);
	img->fatbin = fb;
	img->fatbin_size += (size_t)(c - fb);
	return r;
}

int gx_image_inspect(const void *image, int max_arch, struct gx_image *img)
{
	const unsigned char *p = image;

	memset(img, 0, sizeof(*img));
	if (!p) {
		snprintf(img->reason, sizeof(img->reason), "null-image");
		return -1;
	}
	/* test the first byte before reading four: a PTX string may be shorter */
	if (p[0] == 0xb1 && rd32(p) == GX_FATBINC_MAGIC) {
		const unsigned char *fb;
		uint32_t version = rd32(p + 4);

		img->kind = GX_IMAGE_WRAPPER;
		memcpy(&fb, p + 8, sizeof(fb));
		if (version != 1 && version != 2) {
			snprintf(img->reason, sizeof(img->reason), "wrapper:bad-version-%u", version);
			return -1;
		}
		if (!fb) {
			snprintf(img->reason, sizeof(img->reason), "wrapper:no-data");
			return -1;
		}
		return inspect_region(fb, max_arch, img);
	}
	if (p[0] == 0x50 && rd32(p) == GX_FATBIN_MAGIC) {
		img->kind = GX_IMAGE_FATBIN;
		return inspect_region(p, max_arch, img);
	}
	if (p[0] == 0x7f && p[1] == 'E' && p[1] && p[2] == 'L' && p[3] == 'F') {
		img->kind = GX_IMAGE_ELF;
		snprintf(img->reason, sizeof(img->reason), "sass-only:cubin");
		return -1;
	}
	if (looks_like_ptx((const char *)p)) {
		img->kind = GX_IMAGE_PTX;
		img->ptx = (const char *)p;
		img->ptx_len = strlen(img->ptx);
		return 0;
	}
	snprintf(img->reason, sizeof(img->reason), "unknown-image");
	return -1;
}
