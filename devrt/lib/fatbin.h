/*
 * fatbin.h - recognises the CUDA images an application hands to
 * cuLibraryLoadData / cuModuleLoadData(Ex) / cuModuleLoadFatBinary and finds
 * the PTX in them for the device-probe patcher: a __fatBinC_Wrapper_t
 * (magic 0x466243b1) around a fatbin container, a bare fatbin container
 * (magic 0xBA55ED50), bare PTX text, or a cubin ELF (SASS only). Layout notes
 * in docs/device-probes.md, "Device probes in the interposer".
 */
#ifndef GPUEXT_FATBIN_H
#define GPUEXT_FATBIN_H

#include <stddef.h>
#include <stdint.h>

#define GX_FATBINC_MAGIC 0x466243b1u  /* __fatBinC_Wrapper_t.magic */
#define GX_FATBIN_MAGIC 0xBA55ED50u   /* fatbin container header */
#define GX_FATBIN_KIND_PTX 1
#define GX_FATBIN_KIND_ELF 2
#define GX_FATBIN_FLAG_LZ4 0x2000ull  /* payload compressed (LZ4 block), CUDA 11/12 */
#define GX_FATBIN_FLAG_ZSTD 0x8000ull /* payload compressed (zstd frame), newer toolkits */
#define GX_FATBIN_ENTRY_MIN 64        /* bytes of an entry header before any extension */

enum gx_image_kind { GX_IMAGE_UNKNOWN, GX_IMAGE_WRAPPER, GX_IMAGE_FATBIN, GX_IMAGE_PTX, GX_IMAGE_ELF };

struct gx_image {
	enum gx_image_kind kind;
	const unsigned char *fatbin; /* the container, if any */
	size_t fatbin_size;          /* header + body */
	int n_ptx, n_elf, n_ptx_compressed;
	const char *ptx;             /* the chosen PTX text (not necessarily NUL-terminated); NULL if none */
	size_t ptx_len;
	int ptx_arch;                /* the chosen entry's arch (compute_XX), 0 for bare PTX */
	int ptx_was_compressed;
	char *owned;                 /* decompressed text behind ptx, freed by gx_image_release */
	char reason[128];            /* why there is no usable PTX (one token) */
};

/*
 * Inspects an image. max_arch > 0 limits the PTX chosen to compute_<=max_arch
 * (the device's compute capability, 90 for sm_90); the highest such arch wins.
 * Returns 0 when img->ptx is usable, -1 with img->reason otherwise. Never
 * reads past what the container's headers declare.
 */
int gx_image_inspect(const void *image, int max_arch, struct gx_image *img);
void gx_image_release(struct gx_image *img);
const char *gx_image_kind_name(enum gx_image_kind k);

#endif /* GPUEXT_FATBIN_H */
