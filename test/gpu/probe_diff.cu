// probe_diff.cu - the GPU half of the device-probe differential test.
//
// gpubpf/cmd/gpuext-probe-corpus (run as root on a host with BPF)
// writes DIR/corpus.ptx, every corpus program of gpubpf/difftest
// translated to PTX with its harness entry and the CUDA helper library, and
// DIR/corpus.txt, what the host kernel's BPF_PROG_TEST_RUN made of each
// program. This harness JIT-loads corpus.ptx through the CUDA driver API
// and, per program: writes every map symbol's initial bytes, copies the
// context in, launches the harness entry with one thread, copies back r0,
// the context and the maps, and compares them with the kernel's results.
// Maps are compared decoded (array: every index; hash: the live entries
// ordered by key), as the host reads them; --strict also compares the map
// bytes with the executable device map spec (gpubpf/devmap/devmap.go:
// seq words, bucket positions), which checks the helper library byte for
// byte (per-warp maps excepted: their bytes depend on the SM that ran the
// block).
//
//   nvcc -O2 -o probe_diff test/gpu/probe_diff.cu -lcuda
//   ./probe_diff DIR [--strict] [--verbose]
//
// Prints one MISMATCH line per difference and ends with
// "PASS probe-diff N programs" or "FAIL probe-diff M/N mismatched"
// (exit status 0 / 1; 2 when the corpus or the module cannot be loaded).
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "read_file.h"

#define MAX_MAPS 8

struct map_expect {
	char *sym;
	uint8_t *init;
	size_t init_len;
	char *entries; /* "key:value ..." hex, ordered by key */
	uint8_t *image;
	size_t image_len;
};

struct prog {
	char *name, *entry;
	uint8_t *ctx, *ctxout;
	size_t ctx_len, ctxout_len;
	uint32_t r0;
	int nmaps;
	struct map_expect maps[MAX_MAPS];
};

static uint8_t *unhex(const char *s, size_t *len)
{
	size_t n = strlen(s);
	if (n % 2)
		return NULL;
	uint8_t *b = (uint8_t *)malloc(n / 2 + 1);
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1) {
			free(b);
			return NULL;
		}
		b[i] = (uint8_t)v;
	}
	*len = n / 2;
	return b;
}

static char *hex(const uint8_t *b, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[b[i] >> 4];
		out[2 * i + 1] = d[b[i] & 15];
	}
	out[2 * n] = 0;
	return out + 2 * n;
}

/* unsparse reads "LEN OFF:HEX ...": LEN bytes, zero but for the runs. */
static uint8_t *unsparse(char *s, size_t *len)
{
	char *save = NULL;
	char *tok = strtok_r(s, " ", &save);
	if (!tok)
		return NULL;
	size_t n = strtoull(tok, NULL, 10);
	uint8_t *b = (uint8_t *)calloc(1, n + 1);
	while ((tok = strtok_r(NULL, " ", &save))) {
		char *colon = strchr(tok, ':');
		if (!colon)
			goto bad;
		*colon = 0;
		size_t off = strtoull(tok, NULL, 10), rl;
		uint8_t *run = unhex(colon + 1, &rl);
		if (!run || off + rl > n)
			goto bad;
		memcpy(b + off, run, rl);
		free(run);
	}
	*len = n;
	return b;
bad:
	free(b);
	return NULL;
}

/* parse_corpus reads corpus.txt (format: gpubpf/difftest.WriteCorpus). */
static struct prog *parse_corpus(char *text, int *nprogs)
{
	int cap = 64, n = 0;
	struct prog *ps = (struct prog *)calloc(cap, sizeof *ps);
	struct prog *cur = NULL;
	int lineno = 0;
	const char *kw = "";
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		lineno++;
		if (line[0] == '#' || line[0] == 0)
			continue;
		char *sp = strchr(line, ' ');
		char *rest = sp ? sp + 1 : (char *)"";
		if (sp)
			*sp = 0;
		kw = line;
		if (!strcmp(line, "prog")) {
			if (n == cap) {
				cap *= 2;
				ps = (struct prog *)realloc(ps, cap * sizeof *ps);
			}
			cur = &ps[n++];
			memset(cur, 0, sizeof *cur);
			char *e = strchr(rest, ' ');
			if (!e)
				goto bad;
			*e = 0;
			cur->name = rest;
			cur->entry = e + 1;
		} else if (!cur) {
			goto bad;
		} else if (!strcmp(line, "ctx")) {
			if (!(cur->ctx = unhex(rest, &cur->ctx_len)))
				goto bad;
		} else if (!strcmp(line, "ctxout")) {
			if (!(cur->ctxout = unhex(rest, &cur->ctxout_len)))
				goto bad;
		} else if (!strcmp(line, "r0")) {
			cur->r0 = (uint32_t)strtoul(rest, NULL, 16);
		} else if (!strcmp(line, "map")) {
			if (cur->nmaps == MAX_MAPS)
				goto bad;
			struct map_expect *m = &cur->maps[cur->nmaps++];
			char *e = strchr(rest, ' ');
			if (!e)
				goto bad;
			*e = 0;
			m->sym = rest;
			if (!(m->init = unsparse(e + 1, &m->init_len)))
				goto bad;
		} else if (!strcmp(line, "expect") || !strcmp(line, "image")) {
			if (!cur->nmaps)
				goto bad;
			struct map_expect *m = &cur->maps[cur->nmaps - 1];
			char *e = strchr(rest, ' ');
			if (!e)
				goto bad;
			*e = 0;
			if (strcmp(rest, m->sym))
				goto bad;
			if (line[0] == 'i') {
				if (!(m->image = unsparse(e + 1, &m->image_len)))
					goto bad;
			} else {
				char *ents = strchr(e + 1, ' ');
				m->entries = ents ? ents + 1 : (char *)"";
			}
		} else if (!strcmp(line, "end")) {
			cur = NULL;
		} else {
			goto bad;
		}
	}
	*nprogs = n;
	return ps;
bad:
	fprintf(stderr, "probe_diff: corpus.txt: cannot parse line %d (%s)\n", lineno, kw);
	return NULL;
}

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/*
 * decode_map renders a device map image (struct gpuext_dmap + data, see
 * gpuext_abi.h) as "key:value ..." ordered by key, the form corpus.txt
 * holds. Returns NULL for a map type the corpus does not use.
 */
static char *decode_map(const uint8_t *img, size_t len, char *why, size_t whylen)
{
	if (len < 32) {
		snprintf(why, whylen, "symbol shorter than its descriptor");
		return NULL;
	}
	uint32_t type = le32(img), ks = le32(img + 4), vs = le32(img + 8), max = le32(img + 12);
	uint32_t nb = le32(img + 16), stride = le32(img + 20);
	uint64_t dsize = le64(img + 24);
	const uint8_t *d = img + 32;
	if (32 + dsize > len) {
		snprintf(why, whylen, "descriptor data_size %llu beyond the symbol", (unsigned long long)dsize);
		return NULL;
	}
	uint32_t n = type == 2 ? nb : max;
	if (type == 4)
		n = max / 8 + 1; /* at most this many records */
	char **ents = (char **)calloc(n ? n : 1, sizeof *ents);
	int k = 0;
	uint64_t rpos = 0, head = type == 4 ? le64(d) : 0;
	for (uint32_t i = 0; i < n; i++) {
		char *s;
		if (type == 1) { /* ARRAY: [u64 seq][value] */
			uint8_t key[4] = {(uint8_t)i, (uint8_t)(i >> 8), (uint8_t)(i >> 16), (uint8_t)(i >> 24)};
			s = (char *)malloc(2 * (4 + vs) + 2);
			char *p = hex(key, 4, s);
			*p++ = ':';
			hex(d + (uint64_t)i * stride + 8, vs, p);
		} else if (type == 2) { /* HASH: [u32 state][u32 hash][key r8][value r8] */
			const uint8_t *b = d + (uint64_t)i * stride;
			if (le32(b) != 2)
				continue;
			s = (char *)malloc(2 * (ks + vs) + 2);
			char *p = hex(b + 8, ks, s);
			*p++ = ':';
			hex(b + 8 + ((ks + 7) & ~7u), vs, p);
		} else if (type == 3) { /* PER_WARP: slots x max x [value r8]; the host sums the u64 words */
			uint8_t key[4] = {(uint8_t)i, (uint8_t)(i >> 8), (uint8_t)(i >> 16), (uint8_t)(i >> 24)};
			uint8_t *sum = (uint8_t *)calloc(1, stride);
			for (uint64_t slot = 0; slot < nb; slot++) {
				const uint8_t *v = d + (slot * max + i) * stride;
				for (uint32_t w = 0; w + 8 <= stride; w += 8) {
					uint64_t x = le64(sum + w) + le64(v + w);
					for (int b = 0; b < 8; b++)
						sum[w + b] = (uint8_t)(x >> (8 * b));
				}
			}
			s = (char *)malloc(2 * (4 + vs) + 2);
			char *p = hex(key, 4, s);
			*p++ = ':';
			hex(sum, vs, p);
			free(sum);
		} else if (type == 4) { /* RINGBUF: [u64 head][u64 dropped][records]; key = record number */
			if (rpos + 8 > head || rpos + 8 > max)
				break;
			uint32_t rl = le32(d + 16 + rpos);
			if (rpos + 8 + rl > max) {
				snprintf(why, whylen, "ringbuf record at %llu overruns the log", (unsigned long long)rpos);
				free(ents);
				return NULL;
			}
			uint8_t key[8];
			for (int b = 0; b < 8; b++)
				key[b] = (uint8_t)((uint64_t)i >> (8 * b));
			s = (char *)malloc(2 * (8 + rl) + 2);
			char *p = hex(key, 8, s);
			*p++ = ':';
			hex(d + 16 + rpos + 8, rl, p);
			rpos += 8 + ((rl + 7) & ~7u);
		} else {
			snprintf(why, whylen, "map type %u is not a device map type", type);
			free(ents);
			return NULL;
		}
		ents[k++] = s;
	}
	qsort(ents, k, sizeof *ents, cmpstr);
	size_t total = 1;
	for (int i = 0; i < k; i++)
		total += strlen(ents[i]) + 1;
	char *out = (char *)malloc(total);
	out[0] = 0;
	char *p = out;
	for (int i = 0; i < k; i++) {
		if (i)
			*p++ = ' ';
		size_t l = strlen(ents[i]);
		memcpy(p, ents[i], l + 1);
		p += l;
		free(ents[i]);
	}
	free(ents);
	return out;
}

#define CK(call)                                                                          \
	do {                                                                                  \
		CUresult r_ = (call);                                                             \
		if (r_ != CUDA_SUCCESS) {                                                         \
			const char *s_ = "?";                                                         \
			cuGetErrorName(r_, &s_);                                                      \
			fprintf(stderr, "probe_diff: %s: %s (line %d)\n", #call, s_, __LINE__);       \
			return 2;                                                                     \
		}                                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	const char *dir = NULL;
	int strict = 0, verbose = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--strict"))
			strict = 1;
		else if (!strcmp(argv[i], "--verbose"))
			verbose = 1;
		else
			dir = argv[i];
	}
	if (!dir) {
		fprintf(stderr, "usage: probe_diff DIR [--strict] [--verbose]  (DIR holds corpus.ptx and corpus.txt)\n");
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/corpus.ptx", dir);
	char *ptx = read_file(path, NULL);
	snprintf(path, sizeof path, "%s/corpus.txt", dir);
	char *txt = read_file(path, NULL);
	if (!ptx || !txt) {
		fprintf(stderr, "probe_diff: cannot read %s/corpus.ptx and corpus.txt\n", dir);
		return 2;
	}
	int n = 0;
	struct prog *ps = parse_corpus(txt, &n);
	if (!ps)
		return 2;

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	/* the primary context: cuCtxCreate changed its signature in CUDA 13 */
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	static char errlog[1 << 16], infolog[1 << 16];
	CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
			       CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
	void *vals[] = {errlog, (void *)(uintptr_t)sizeof errlog, infolog, (void *)(uintptr_t)sizeof infolog};
	CUresult lr = cuModuleLoadDataEx(&mod, ptx, 4, opts, vals);
	if (lr != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorName(lr, &s);
		fprintf(stderr, "probe_diff: cuModuleLoadDataEx(corpus.ptx): %s\n%s\n", s, errlog);
		return 2;
	}
	if (verbose && infolog[0])
		printf("jit: %s\n", infolog);

	CUdeviceptr dctx = 0, dret = 0;
	size_t ctxcap = 0;
	CK(cuMemAlloc(&dret, 8));
	int bad = 0;
	for (int i = 0; i < n; i++) {
		struct prog *p = &ps[i];
		int mism = 0;
		CUfunction f;
		if (cuModuleGetFunction(&f, mod, p->entry) != CUDA_SUCCESS) {
			printf("MISMATCH %s: entry %s not in the module\n", p->name, p->entry);
			bad++;
			continue;
		}
		CUdeviceptr gsym[MAX_MAPS];
		for (int m = 0; m < p->nmaps; m++) {
			size_t bytes = 0;
			if (cuModuleGetGlobal(&gsym[m], &bytes, mod, p->maps[m].sym) != CUDA_SUCCESS ||
			    bytes != p->maps[m].init_len) {
				printf("MISMATCH %s: map symbol %s missing or not %zu bytes\n", p->name, p->maps[m].sym,
				       p->maps[m].init_len);
				mism = 1;
				break;
			}
			CK(cuMemcpyHtoD(gsym[m], p->maps[m].init, bytes));
		}
		if (mism) {
			bad++;
			continue;
		}
		if (p->ctx_len > ctxcap) {
			if (dctx)
				CK(cuMemFree(dctx));
			CK(cuMemAlloc(&dctx, p->ctx_len));
			ctxcap = p->ctx_len;
		}
		CK(cuMemcpyHtoD(dctx, p->ctx, p->ctx_len));
		uint64_t ret = 0xbad0bad0bad0bad0ull;
		CK(cuMemcpyHtoD(dret, &ret, 8));
		void *args[] = {&dctx, &dret};
		CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
		if (r == CUDA_SUCCESS)
			r = cuCtxSynchronize();
		if (r != CUDA_SUCCESS) {
			const char *s = "?";
			cuGetErrorName(r, &s);
			printf("MISMATCH %s: launch failed: %s (the context is lost; %d programs not run)\n", p->name, s,
			       n - i - 1);
			bad += n - i;
			break;
		}
		uint8_t *out = (uint8_t *)malloc(p->ctx_len);
		CK(cuMemcpyDtoH(out, dctx, p->ctx_len));
		CK(cuMemcpyDtoH(&ret, dret, 8));
		if ((uint32_t)ret != p->r0) {
			printf("MISMATCH %s: r0 %08x, kernel %08x\n", p->name, (uint32_t)ret, p->r0);
			mism = 1;
		}
		for (size_t off = 0; off < p->ctx_len && off < p->ctxout_len; off += 8) {
			size_t l = p->ctx_len - off < 8 ? p->ctx_len - off : 8;
			if (memcmp(out + off, p->ctxout + off, l)) {
				char a[17], b[17];
				hex(out + off, l, a);
				hex(p->ctxout + off, l, b);
				printf("MISMATCH %s: ctx[%zu:%zu] %s, kernel %s\n", p->name, off, off + l, a, b);
				mism = 1;
			}
		}
		free(out);
		for (int m = 0; m < p->nmaps; m++) {
			struct map_expect *me = &p->maps[m];
			uint8_t *img = (uint8_t *)malloc(me->init_len);
			CK(cuMemcpyDtoH(img, gsym[m], me->init_len));
			char why[256];
			char *got = decode_map(img, me->init_len, why, sizeof why);
			if (!got) {
				printf("MISMATCH %s: map %s: %s\n", p->name, me->sym, why);
				mism = 1;
			} else if (strcmp(got, me->entries)) {
				printf("MISMATCH %s: map %s {%s}, kernel {%s}\n", p->name, me->sym, got, me->entries);
				mism = 1;
			}
			free(got);
			/* A per-warp map's bytes depend on the SM the block ran on. */
			int per_warp = me->init_len >= 4 && le32(me->init) == 3;
			if (strict && !per_warp && me->image &&
			    (me->image_len != me->init_len || memcmp(img, me->image, me->init_len))) {
				size_t at = 0;
				while (at < me->init_len && at < me->image_len && img[at] == me->image[at])
					at++;
				printf("MISMATCH %s: map %s bytes differ from the device map spec from offset %zu\n", p->name,
				       me->sym, at);
				mism = 1;
			}
			free(img);
		}
		if (verbose && !mism)
			printf("ok %s\n", p->name);
		bad += mism;
	}
	if (bad) {
		printf("FAIL probe-diff %d/%d mismatched\n", bad, n);
		return 1;
	}
	printf("PASS probe-diff %d programs\n", n);
	return 0;
}
