/*
 * ptxpatch_cli.c - runs the interposer's image inspection and PTX splice
 * (devrt/lib/fatbin.c, devrt/lib/ptxpatch.c, the same sources) on files, for
 * the golden tests and for checking real nvcc output by hand.
 *
 *   ptxpatch_cli [-c module.conf [-C]] FRAGMENT INPUT   patched PTX on stdout (exit 0),
 *                                                 or "unpatched REASON" (exit 3)
 *                                                 With "inline 1" in module.conf, inline_entry.ptx and
 *                                                 inline_exit.ptx are read from its directory, as the
 *                                                 interposer does; -C ignores them (the call form).
 *   ptxpatch_cli -i [-a ARCH] INPUT               what the image holds, key=value
 *   ptxpatch_cli -m FILE.maps                     a copied-out maps file: header, then per map
 *                                                 its name, size and first 64 u64 words
 *
 * INPUT is PTX text, a fatbin container, or a cubin. Without -c: min_ptx 7.8,
 * min_target 70, every .entry.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fatbin.h"
#include "ptxpatch.h"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0, r;

	if (!f)
		return NULL;
	do {
		if (n + 65536 + 1 > cap) {
			char *nb;

			cap = (n + 65536 + 1) * 2;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		r = fread(buf + n, 1, 65536, f);
		n += r;
	} while (r > 0);
	fclose(f);
	/* zero padding so a short file is never read past its end by the magic checks */
	memset(buf + n, 0, cap - n);
	*len = n;
	return buf;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int k = 7; k >= 0; k--)
		v = (v << 8) | p[k];
	return v;
}

static int dump_maps(const char *path)
{
	size_t n, off = 48;
	unsigned char *b = (unsigned char *)slurp(path, &n);
	uint32_t count;

	if (!b || n < 48 || memcmp(b, "GXPMAPS\0", 8) != 0) {
		fprintf(stderr, "%s: not a maps file\n", path);
		return 2;
	}
	count = (uint32_t)le64(b + 20);
	printf("maps version=%u pid=%u image=%u count=%u seq=%llu time_ns=%llu tenant=%u final=%u\n",
	       (unsigned)(le64(b + 8) & 0xffffffffu), (unsigned)(le64(b + 12) & 0xffffffffu),
	       (unsigned)(le64(b + 16) & 0xffffffffu), count & 0xffffffffu, (unsigned long long)le64(b + 24),
	       (unsigned long long)le64(b + 32), (unsigned)(le64(b + 40) & 0xffffffffu),
	       (unsigned)(le64(b + 44) & 0xffffffffu));
	for (uint32_t i = 0; i < (count & 0xffffffffu) && off + 72 <= n; i++) {
		uint64_t sz = le64(b + off + 64);

		printf("map name=%.64s bytes=%llu\n", (const char *)b + off, (unsigned long long)sz);
		off += 72;
		printf("  u64:");
		for (uint64_t k = 0; k + 8 <= sz && k < 64 * 8 && off + k + 8 <= n; k += 8)
			printf(" %llu", (unsigned long long)le64(b + off + k));
		printf("\n");
		off += (sz + 7) & ~7ull;
	}
	free(b);
	return 0;
}

int main(int argc, char **argv)
{
	const char *conf_path = NULL;
	int info = 0, max_arch = 0, opt, call_form = 0;
	char *inl[2] = {NULL, NULL};
	struct gx_probe_conf conf;
	struct gx_image img;
	struct gx_ptx_result res;
	char err[160];
	char *frag = NULL, *in;
	size_t frag_len = 0, in_len;

	if (argc == 3 && !strcmp(argv[1], "-m"))
		return dump_maps(argv[2]);
	while ((opt = getopt(argc, argv, "c:ia:C")) != -1) {
		switch (opt) {
		case 'c': conf_path = optarg; break;
		case 'C': call_form = 1; break;
		case 'i': info = 1; break;
		case 'a': max_arch = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-c module.conf [-C]] FRAGMENT INPUT | -i [-a ARCH] INPUT | -m FILE.maps\n", argv[0]);
			return 2;
		}
	}
	if (argc - optind != (info ? 1 : 2)) {
		fprintf(stderr, "usage: %s [-c module.conf [-C]] FRAGMENT INPUT | -i [-a ARCH] INPUT | -m FILE.maps\n", argv[0]);
		return 2;
	}
	in = slurp(argv[argc - 1], &in_len);
	if (!in) {
		perror(argv[argc - 1]);
		return 2;
	}
	if (gx_image_inspect(in, max_arch, &img) != 0 && info) {
		printf("kind=%s ptx=%d ptx_compressed=%d elf=%d usable=0 reason=%s\n", gx_image_kind_name(img.kind),
		       img.n_ptx, img.n_ptx_compressed, img.n_elf, img.reason);
		return 0;
	}
	if (info) {
		printf("kind=%s ptx=%d ptx_compressed=%d elf=%d usable=1 arch=%d compressed=%d ptx_bytes=%zu\n",
		       gx_image_kind_name(img.kind), img.n_ptx, img.n_ptx_compressed, img.n_elf, img.ptx_arch,
		       img.ptx_was_compressed, img.ptx_len);
		return 0;
	}
	if (!img.ptx) {
		printf("unpatched %s\n", img.reason);
		return 3;
	}
	if (conf_path) {
		size_t cl;
		char *ct = slurp(conf_path, &cl);

		if (!ct || gx_probe_conf_parse(ct, cl, &conf, err, sizeof(err)) != 0) {
			printf("unpatched %s\n", ct ? err : "module.conf-unreadable");
			return 3;
		}
		free(ct);
		if (conf.inline_form && !call_form) {
			static const char *const names[2] = {"inline_entry.ptx", "inline_exit.ptx"};
			const char *slash = strrchr(conf_path, '/');
			size_t dl = slash ? (size_t)(slash - conf_path) + 1 : 0, il[2] = {0, 0};

			for (int k = 0; k < 2; k++) {
				char path[4096];

				snprintf(path, sizeof(path), "%.*s%s", (int)dl, conf_path, names[k]);
				if (!(inl[k] = slurp(path, &il[k]))) {
					perror(path);
					return 2;
				}
			}
			conf.opts.inline_entry = inl[0];
			conf.opts.inline_entry_len = il[0];
			conf.opts.inline_exit = inl[1];
			conf.opts.inline_exit_len = il[1];
		}
	} else {
		memset(&conf, 0, sizeof(conf));
		conf.opts.min_ptx_major = 7;
		conf.opts.min_ptx_minor = 8;
		conf.opts.min_target = 70;
	}
	frag = slurp(argv[optind], &frag_len);
	if (!frag) {
		perror(argv[optind]);
		return 2;
	}
	if (gx_ptx_patch(img.ptx, img.ptx_len, frag, frag_len, &conf.opts, &res) != 0) {
		printf("unpatched %s\n", res.reason);
		return 3;
	}
	fwrite(res.text, 1, res.len, stdout);
	free(res.text);
	gx_image_release(&img);
	gx_probe_conf_free(&conf);
	free(inl[0]);
	free(inl[1]);
	free(frag);
	free(in);
	return 0;
}
