/*
 * ptxpatch_cli.c - runs the interposer's image inspection and PTX splice
 * (devrt/lib/fatbin.c, devrt/lib/ptxpatch.c, the same sources) on files, for
 * the golden tests and for checking real nvcc output by hand.
 *
 *   ptxpatch_cli [-c module.conf] FRAGMENT INPUT   patched PTX on stdout (exit 0),
 *                                                 or "unpatched REASON" (exit 3)
 *   ptxpatch_cli -i [-a ARCH] INPUT               what the image holds, key=value
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

int main(int argc, char **argv)
{
	const char *conf_path = NULL;
	int info = 0, max_arch = 0, opt;
	struct gx_probe_conf conf;
	struct gx_image img;
	struct gx_ptx_result res;
	char err[160];
	char *frag = NULL, *in;
	size_t frag_len = 0, in_len;

	while ((opt = getopt(argc, argv, "c:ia:")) != -1) {
		switch (opt) {
		case 'c': conf_path = optarg; break;
		case 'i': info = 1; break;
		case 'a': max_arch = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-c module.conf] FRAGMENT INPUT | -i [-a ARCH] INPUT\n", argv[0]);
			return 2;
		}
	}
	if (argc - optind != (info ? 1 : 2)) {
		fprintf(stderr, "usage: %s [-c module.conf] FRAGMENT INPUT | -i [-a ARCH] INPUT\n", argv[0]);
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
	free(frag);
	free(in);
	return 0;
}
