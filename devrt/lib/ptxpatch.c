/*
 * ptxpatch.c - splices the device-probe module fragment into a PTX module
 * (docs/device-probes.md, "Patcher" and "Device probes in the interposer").
 *
 * One pass over the text with a small lexer that knows only what the splice
 * needs: comments, strings, words (directives, opcodes, names, registers,
 * numbers), braces, statement boundaries, predicates and labels. Everything
 * it does not change is copied byte for byte. Changes:
 *   - .version raised to the fragment's minimum if lower (never lowered);
 *   - .target below the fragment's minimum: the module is left unpatched;
 *   - the fragment goes right after the .address_size 64 line;
 *   - in each probed .entry body: the entry call after the body's leading
 *     declarations (.reg/.local/.shared/.param), every ret/exit at any depth
 *     (predicated or not) becomes "bra $__gpuext_exit", and one exit block
 *     (label, exit call, ret) is appended before the closing brace.
 * .func bodies and unprobed entries are not touched.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptxpatch.h"

uint64_t gx_kernel_id(const char *name, size_t n)
{
	return gpuext_devrt_kernel_id(name, n);
}

struct gx_out {
	char *p;
	size_t len, cap;
	int oom;
};

static void out_put(struct gx_out *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void out_puts(struct gx_out *b, const char *s)
{
	out_put(b, s, strlen(s));
}

static void out_printf(struct gx_out *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(struct gx_out *b, const char *fmt, ...)
{
	char tmp[2048];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		b->oom = 1; /* never emit a cut statement: the image stays unpatched */
		return;
	}
	out_put(b, tmp, (size_t)n);
}

/* The whitespace that ends the output (the indentation of the statement about to be written). */
static size_t out_indent(const struct gx_out *b, const char **start)
{
	size_t k = b->len;

	while (k > 0 && (b->p[k - 1] == ' ' || b->p[k - 1] == '\t'))
		k--;
	*start = b->p ? b->p + k : "";
	return b->len - k;
}

static int is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
	       c == '%' || c == '.';
}

static int word_is(const char *w, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(w, lit, n) == 0;
}

struct gx_patch {
	const char *s;
	size_t n, i;
	struct gx_out out;
	const struct gx_ptx_opts *o;
	struct gx_ptx_result *res;
	int failed;
	int site; /* the probed .entry being patched, from 0: names the inline sites */
	size_t late_at; /* entry_late: where the entry block goes (just after that load's ';'); 0: none */
	int late_pending; /* the entry block is still to come at late_at */
	int late_site;    /* this body's entry block is late: the exit block runs it on the flag */
	uint64_t late_kid;
};

static int fail(struct gx_patch *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct gx_patch *p, const char *fmt, ...)
{
	va_list ap;

	if (p->failed)
		return -1;
	va_start(ap, fmt);
	vsnprintf(p->res->reason, sizeof(p->res->reason), fmt, ap);
	va_end(ap);
	p->failed = 1;
	return -1;
}

static int line_of(const struct gx_patch *p)
{
	int line = 1;

	for (size_t k = 0; k < p->i && k < p->n; k++)
		line += p->s[k] == '\n';
	return line;
}

/* Copies blanks (not newlines if stop_nl) and returns the next word's length at p->i (0: none). */
static size_t next_word(struct gx_patch *p)
{
	size_t j;

	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t')) {
		out_put(&p->out, p->s + p->i, 1);
		p->i++;
	}
	for (j = p->i; j < p->n && is_word(p->s[j]); j++)
		;
	return j - p->i;
}

static int probe_this(const struct gx_ptx_opts *o, const char *name, size_t n)
{
	if (!o->nkernels)
		return 1;
	for (size_t k = 0; k < o->nkernels; k++)
		if (o->kernels[k] && word_is(name, n, o->kernels[k]))
			return 1;
	return 0;
}

/* the kernel id into the call's parameter, through a register (st takes no immediate everywhere) */
#define GX_PTX_REG_FMT "%%__gpuext_kid" /* GX_PTX_REG in a printf format */
#define GX_PTX_CALL_DECL ".reg .b64 " GX_PTX_REG_FMT "; .param .b64 " GX_PTX_PARAM ";"
#define GX_PTX_CALL_CODE "mov.b64 " GX_PTX_REG_FMT ", 0x%016llxU; st.param.b64 [" GX_PTX_PARAM "], " GX_PTX_REG_FMT ";"
#define GX_PTX_CALL_SETUP GX_PTX_CALL_DECL " " GX_PTX_CALL_CODE

/*
 * The site guard (module.conf guard_*): threads other than linear id 0 of
 * the block branch around the site. Linear id 0 <=> %tid.x|%tid.y|%tid.z == 0.
 * The call is then a plain call: only some threads of warp 0 make it.
 */
#define GX_GP "%%__gpuext_g" /* GX_PTX_GUARD_PRED in a printf format */
#define GX_GT "%%__gpuext_t" /* GX_PTX_GUARD_TMP in a printf format */
#define GX_PTX_GUARD_DECL ".reg .pred " GX_GP "; .reg .b32 " GX_GT "<2>;"
/* pred = this thread is not linear id 0 of its block */
#define GX_PTX_NOT_T0_TEST(pred)                                                                              \
	"mov.u32 " GX_GT "0, %%tid.x; mov.u32 " GX_GT "1, %%tid.y; "                                               \
	"or.b32 " GX_GT "0, " GX_GT "0, " GX_GT "1; mov.u32 " GX_GT "1, %%tid.z; or.b32 " GX_GT "0, " GX_GT        \
	"0, " GX_GT "1; setp.ne.u32 " pred ", " GX_GT "0, 0;"
#define GX_PTX_GUARD(skip) GX_PTX_NOT_T0_TEST(GX_GP) " @" GX_GP " bra " skip ";"

/*
 * Copies t[0..n) with the inline placeholders replaced. A second copy of a
 * block in one body (copy != 0: the late entry block run at the exit) gets
 * labels of its own: the site of a "$__gpuext_i" label is followed by "x".
 */
static void emit_subst_copy(struct gx_patch *p, const char *t, size_t n, int site, uint64_t kid, int copy)
{
	static const char lab[] = "$__gpuext_i";
	size_t ls = strlen(GX_PTX_INLINE_SITE), lk = strlen(GX_PTX_INLINE_KID), ll = sizeof(lab) - 1;

	for (size_t i = 0; i < n;) {
		const char *at = memchr(t + i, '@', n - i);
		size_t k = at ? (size_t)(at - t) : n;

		out_put(&p->out, t + i, k - i);
		i = k;
		if (i >= n)
			break;
		if (n - i >= ls && !memcmp(t + i, GX_PTX_INLINE_SITE, ls)) {
			int is_label = i >= ll && !memcmp(t + i - ll, lab, ll);

			out_printf(&p->out, "%d%s", site, copy && is_label ? "x" : "");
			i += ls;
		} else if (n - i >= lk && !memcmp(t + i, GX_PTX_INLINE_KID, lk)) {
			out_printf(&p->out, "0x%016llxU", (unsigned long long)kid);
			i += lk;
		} else {
			out_put(&p->out, t + i, 1);
			i++;
		}
	}
	if (n && t[n - 1] != '\n')
		out_puts(&p->out, "\n");
}

static void emit_subst(struct gx_patch *p, const char *t, size_t n, int site, uint64_t kid)
{
	emit_subst_copy(p, t, n, site, kid, 0);
}

/* Where a template's block starts: the first line whose first non-blank is '{'. */
static size_t template_block(const char *t, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && (t[j] == ' ' || t[j] == '\t'))
			j++;
		if (j < n && t[j] == '{')
			return i;
		while (i < n && t[i] != '\n')
			i++;
		i++;
	}
	return n;
}

/*
 * The inline form reads the thread-0 test once, at the entry site, into a
 * function-scope predicate, and every guard of the body branches on it.
 * Each guard computing its own (three %tid reads) left ptxas reading
 * %tid.y and %tid.z again on every warp's way out, in front of its EXIT.
 */
#define GX_PTX_NOT_T0 "%%__gpuext_nt0"
#define GX_PTX_NOT_T0_DEF                                                                                     \
	"\t.reg .pred " GX_PTX_NOT_T0 "; { .reg .b32 " GX_GT "<2>; " GX_PTX_NOT_T0_TEST(GX_PTX_NOT_T0)                \
	" } // not thread 0 of the block\n"

/*
 * The block of a template, inside the site guard when there is one (copy:
 * emit_subst_copy). A guarded block always follows its body's entry site,
 * which set GX_PTX_NOT_T0 (emit_entry_call).
 */
static void emit_inline_copy(struct gx_patch *p, const char *t, size_t n, int guard, int entry, int site, uint64_t kid,
			     int copy)
{
	size_t b = template_block(t, n);
	const char *skip = !entry ? GX_PTX_SKIP_EXIT : copy ? GX_PTX_SKIP_ENTRY_AT_EXIT : GX_PTX_SKIP_ENTRY;

	if (guard)
		out_printf(&p->out, "{ @" GX_PTX_NOT_T0 " bra %s;\n", skip);
	emit_subst_copy(p, t + b, n - b, site, kid, copy);
	if (guard)
		out_printf(&p->out, "%s: }\n", skip);
}

static void emit_inline(struct gx_patch *p, const char *t, size_t n, int guard, int entry, int site, uint64_t kid)
{
	emit_inline_copy(p, t, n, guard, entry, site, kid, 0);
}

/*
 * entry_late: where the entry block goes, scanning the body from its first
 * statement at s[i]: just after the ';' of the first statement whose opcode
 * is ld.global* or ldu.global* (predicated or not), when only statements
 * come before it: a label (something may branch back to it), a brace, a
 * string or the end of the body first, or no such load within
 * GX_LATE_MAX_STMTS statements, and it is 0 (the entry block stays at the
 * first statement). With no label before it, the load runs at most once a
 * thread; a thread that skips it (a forward branch, an early ret) runs the
 * entry block at the exit instead.
 */
#define GX_LATE_MAX_STMTS 256
#define GX_PTX_LATE_FLAG "%__gpuext_late" /* kernel scope: the late entry block has run (b32, 0 or 1) */
#define GX_PTX_LATE_PRED "%__gpuext_latep"
#define GX_PTX_LATE_DONE "$__gpuext_late_done"

static size_t late_site(const char *s, size_t i, size_t n)
{
	for (int stmts = 0; i < n && stmts < GX_LATE_MAX_STMTS; stmts++) {
		size_t j, k;
		int load;

		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v'))
			i++;
		if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') {
			while (i < n && s[i] != '\n')
				i++;
			stmts--;
			continue;
		}
		if (i + 1 < n && s[i] == '/' && s[i + 1] == '*') {
			const char *end = memmem(s + i + 2, n - i - 2, "*/", 2);

			if (!end)
				return 0;
			i = (size_t)(end - s) + 2;
			stmts--;
			continue;
		}
		if (i >= n || !s[i])
			return 0;
		if (s[i] == '@') { /* a guard predicate: @%p or @!%p */
			i++;
			if (i < n && s[i] == '!')
				i++;
			while (i < n && is_word(s[i]))
				i++;
			while (i < n && (s[i] == ' ' || s[i] == '\t'))
				i++;
		}
		for (j = i; j < n && is_word(s[j]); j++)
			;
		if (j == i)
			return 0; /* a brace, a string, anything not a statement */
		for (k = j; k < n && (s[k] == ' ' || s[k] == '\t'); k++)
			;
		if (k < n && s[k] == ':')
			return 0; /* a label */
		load = (j - i >= 9 && !memcmp(s + i, "ld.global", 9)) || (j - i >= 10 && !memcmp(s + i, "ldu.global", 10));
		for (; j < n && s[j] != ';'; j++)
			if (s[j] == '{' || s[j] == '}' || s[j] == '"' || s[j] == '/' || !s[j])
				return 0;
		if (j >= n)
			return 0;
		if (load)
			return j + 1;
		i = j + 1;
	}
	return 0;
}


/* The declarations of a template (before its block), without comment and blank lines. */
static void emit_decls(struct gx_patch *p, const char *t, size_t n, int site, uint64_t kid)
{
	size_t end = template_block(t, n);

	for (size_t i = 0; i < end;) {
		size_t j = i, e = i;

		while (e < end && t[e] != '\n')
			e++;
		while (j < e && (t[j] == ' ' || t[j] == '\t' || t[j] == '\r'))
			j++;
		if (j < e && !(e - j >= 2 && t[j] == '/' && t[j + 1] == '/'))
			emit_subst(p, t + i, e - i, site, kid);
		i = e + 1;
	}
}

/*
 * An inline template translated for the thread-0 site guard (it takes the
 * linear thread id as 0) says so in a comment line; it runs under the guard
 * whatever module.conf says, or every thread would act as thread 0.
 */
static int inline_guard(const char *t, size_t n, int conf_guard)
{
	static const char mark[] = "\n" GX_INLINE_GUARD_MARK "\n";

	return conf_guard == GX_GUARD_THREAD0 || (t && memmem(t, n, mark, sizeof(mark) - 1) != NULL);
}

static int use_inline(const struct gx_ptx_opts *o)
{
	return o->inline_entry && o->inline_exit && o->inline_entry_len && o->inline_exit_len;
}

/* The late entry block, at late_at: it sets the flag the exit block reads. */
static void emit_late_entry(struct gx_patch *p)
{
	const struct gx_ptx_opts *o = p->o;
	int g = inline_guard(o->inline_entry, o->inline_entry_len, o->guard_entry);

	out_printf(&p->out, "\n// gpuext probe: kernel entry, inline (site %d), after the first global load%s\n", p->site,
		   g ? ", thread 0 of the block" : "");
	emit_inline(p, o->inline_entry, o->inline_entry_len, g, 1, p->site, p->late_kid);
	out_puts(&p->out, "\tmov.u32 " GX_PTX_LATE_FLAG ", 1;");
	p->late_pending = 0;
}

/* The entry site, at the body's first statement s[at]. */
static void emit_entry_call(struct gx_patch *p, uint64_t kid, size_t at)
{
	const char *ind;
	size_t nind = out_indent(&p->out, &ind);
	char indent[64];
	const struct gx_ptx_opts *o = p->o;

	if (nind >= sizeof(indent))
		nind = sizeof(indent) - 1;
	memcpy(indent, ind, nind);
	indent[nind] = 0;
	if (use_inline(o)) {
		/* both sites' function-scope declarations, then the entry block */
		int g = inline_guard(o->inline_entry, o->inline_entry_len, o->guard_entry);

		out_printf(&p->out, "// gpuext probe: kernel entry, inline (site %d)%s\n", p->site,
			   g ? ", thread 0 of the block" : "");
		emit_decls(p, o->inline_entry, o->inline_entry_len, p->site, kid);
		emit_decls(p, o->inline_exit, o->inline_exit_len, p->site, kid);
		if (g || inline_guard(o->inline_exit, o->inline_exit_len, o->guard_exit))
			out_printf(&p->out, GX_PTX_NOT_T0_DEF);
		p->late_at = o->entry_late ? late_site(p->s, at, p->n) : 0;
		if (p->late_at) {
			/* the block comes after the first global load (emit_late_entry) */
			out_puts(&p->out, "\t.reg .b32 " GX_PTX_LATE_FLAG "; .reg .pred " GX_PTX_LATE_PRED "; mov.u32 " GX_PTX_LATE_FLAG
					  ", 0; // the entry block: after the first global load\n");
			p->late_pending = p->late_site = 1;
			p->late_kid = kid;
			p->res->late++;
			out_puts(&p->out, indent);
			return;
		}
		emit_inline(p, o->inline_entry, o->inline_entry_len, g, 1, p->site, kid);
		out_puts(&p->out, indent);
		return;
	}
	if (o->guard_entry == GX_GUARD_THREAD0)
		out_printf(&p->out,
			   "{ " GX_PTX_GUARD_DECL " " GX_PTX_CALL_DECL " " GX_PTX_GUARD(GX_PTX_SKIP_ENTRY) " " GX_PTX_CALL_CODE
			   " call " GX_PTX_FUNC_ENTRY ", (" GX_PTX_PARAM "); " GX_PTX_SKIP_ENTRY
			   ": } // gpuext probe: kernel entry, thread 0 of the block\n%s",
			   (unsigned long long)kid, indent);
	else
		out_printf(&p->out,
			   "{ " GX_PTX_CALL_SETUP " call.uni " GX_PTX_FUNC_ENTRY ", (" GX_PTX_PARAM
			   "); } // gpuext probe: kernel entry\n%s",
			   (unsigned long long)kid, indent);
}

static void emit_exit_block(struct gx_patch *p, uint64_t kid)
{
	const struct gx_ptx_opts *o = p->o;

	if (p->out.len && p->out.p[p->out.len - 1] != '\n') {
		/* drop the closing brace's indentation, then start a fresh line */
		while (p->out.len && (p->out.p[p->out.len - 1] == ' ' || p->out.p[p->out.len - 1] == '\t'))
			p->out.len--;
		if (p->out.len && p->out.p[p->out.len - 1] != '\n')
			out_puts(&p->out, "\n");
	}
	if (use_inline(o)) {
		int g = inline_guard(o->inline_exit, o->inline_exit_len, o->guard_exit);

		out_printf(&p->out, GX_PTX_EXIT_LABEL ": // gpuext probe: kernel exit, inline (site %d)%s\n", p->site,
			   g ? ", thread 0 of the block" : "");
		if (p->late_site) {
			/* a thread that never reached the late entry block runs it here, first */
			int ge = inline_guard(o->inline_entry, o->inline_entry_len, o->guard_entry);

			out_puts(&p->out, "\tsetp.ne.u32 " GX_PTX_LATE_PRED ", " GX_PTX_LATE_FLAG
					  ", 0; @" GX_PTX_LATE_PRED " bra " GX_PTX_LATE_DONE "; // entry block not run yet\n");
			emit_inline_copy(p, o->inline_entry, o->inline_entry_len, ge, 1, p->site, kid, 1);
			out_puts(&p->out, GX_PTX_LATE_DONE ":\n");
		}
		emit_inline(p, o->inline_exit, o->inline_exit_len, g, 0, p->site, kid);
		out_puts(&p->out, "\tret;\n");
		return;
	}
	if (o->guard_exit == GX_GUARD_THREAD0)
		out_printf(&p->out,
			   GX_PTX_EXIT_LABEL ": // gpuext probe: kernel exit, thread 0 of the block\n"
			   "\t{ " GX_PTX_GUARD_DECL " " GX_PTX_CALL_DECL " " GX_PTX_GUARD(GX_PTX_SKIP_EXIT) " " GX_PTX_CALL_CODE
			   " call " GX_PTX_FUNC_EXIT ", (" GX_PTX_PARAM "); " GX_PTX_SKIP_EXIT ": }\n"
			   "\tret;\n",
			   (unsigned long long)kid);
	else
		out_printf(&p->out,
			   GX_PTX_EXIT_LABEL ": // gpuext probe: kernel exit\n"
			   "\t{ " GX_PTX_CALL_SETUP " call " GX_PTX_FUNC_EXIT ", (" GX_PTX_PARAM "); }\n"
			   "\tret;\n",
			   (unsigned long long)kid);
}

static int is_decl(const char *w, size_t n)
{
	return word_is(w, n, ".reg") || word_is(w, n, ".local") || word_is(w, n, ".shared") || word_is(w, n, ".param");
}

static int parse_version(const char *w, size_t n, int *maj, int *min)
{
	char tmp[16];
	char *end;

	if (n == 0 || n >= sizeof(tmp))
		return -1;
	memcpy(tmp, w, n);
	tmp[n] = 0;
	*maj = (int)strtol(tmp, &end, 10);
	if (end == tmp || *end != '.')
		return -1;
	*min = (int)strtol(end + 1, &end, 10);
	return *end ? -1 : 0;
}

int gx_ptx_patch(const char *ptx, size_t len, const char *frag, size_t frag_len, const struct gx_ptx_opts *o,
		 struct gx_ptx_result *res)
{
	struct gx_patch p = {.s = ptx, .n = len, .o = o, .res = res};
	enum { HEAD_NONE, HEAD_ENTRY, HEAD_FUNC } head = HEAD_NONE;
	int depth = 0, stmt_start = 1, pred = 0, seen_version = 0, seen_target = 0, frag_done = 0;
	int in_body = 0, want_call = 0, head_probe = 0;
	uint64_t kid = 0, head_kid = 0;

	memset(res, 0, sizeof(*res));
	snprintf(res->reason, sizeof(res->reason), "ok");
	if (!ptx || !frag || !frag_len)
		return fail(&p, "no-input"), -1;
	if (memmem(ptx, len, GX_PTX_FUNC_ENTRY, strlen(GX_PTX_FUNC_ENTRY)))
		return fail(&p, "already-patched");
	out_put(&p.out, "", 0);
	if (!p.out.p) {
		snprintf(res->reason, sizeof(res->reason), "out-of-memory");
		return -1;
	}
	while (p.i < p.n && !p.failed && !p.out.oom) {
		char c = p.s[p.i];
		size_t j;

		if (c == 0)
			break; /* a NUL-terminated image: the text ends here */
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
			out_put(&p.out, &c, 1);
			p.i++;
			continue;
		}
		if (c == '/' && p.i + 1 < p.n && p.s[p.i + 1] == '/') {
			for (j = p.i; j < p.n && p.s[j] != '\n' && p.s[j]; j++)
				;
			out_put(&p.out, p.s + p.i, j - p.i);
			p.i = j;
			continue;
		}
		if (c == '/' && p.i + 1 < p.n && p.s[p.i + 1] == '*') {
			const char *end = memmem(p.s + p.i + 2, p.n - p.i - 2, "*/", 2);

			if (!end)
				return fail(&p, "parse:unterminated-comment@line%d", line_of(&p)), free(p.out.p), -1;
			j = (size_t)(end - p.s) + 2;
			out_put(&p.out, p.s + p.i, j - p.i);
			p.i = j;
			continue;
		}
		if (c == '"') {
			for (j = p.i + 1; j < p.n && p.s[j] != '"' && p.s[j] != '\n'; j++)
				if (p.s[j] == '\\')
					j++;
			if (j >= p.n || p.s[j] != '"')
				return fail(&p, "parse:unterminated-string@line%d", line_of(&p)), free(p.out.p), -1;
			j++;
			out_put(&p.out, p.s + p.i, j - p.i);
			p.i = j;
			stmt_start = 0;
			continue;
		}
		if (is_word(c)) {
			const char *w = p.s + p.i;
			size_t wn;

			for (j = p.i; j < p.n && is_word(p.s[j]); j++)
				;
			wn = j - p.i;
			if (depth == 0) {
				out_put(&p.out, w, wn);
				p.i = j;
				if (word_is(w, wn, ".version")) {
					int maj, min;
					size_t vn = next_word(&p);

					if (parse_version(p.s + p.i, vn, &maj, &min) != 0)
						return fail(&p, "parse:version@line%d", line_of(&p)), free(p.out.p), -1;
					if (maj < o->min_ptx_major || (maj == o->min_ptx_major && min < o->min_ptx_minor))
						out_printf(&p.out, "%d.%d", o->min_ptx_major, o->min_ptx_minor);
					else
						out_put(&p.out, p.s + p.i, vn);
					p.i += vn;
					seen_version = 1;
				} else if (word_is(w, wn, ".target")) {
					size_t tn = next_word(&p);
					const char *t = p.s + p.i;
					int sm = 0;

					snprintf(res->target_text, sizeof(res->target_text), "%.*s",
						 (int)(tn < 31 ? tn : 31), t);
					if (tn > 3 && memcmp(t, "sm_", 3) == 0)
						sm = atoi(t + 3);
					if (sm <= 0)
						return fail(&p, "target-unknown:%s", res->target_text), free(p.out.p), -1;
					res->target = sm;
					if (sm < o->min_target)
						return fail(&p, "target-too-low:%s<sm_%d", res->target_text, o->min_target),
						       free(p.out.p), -1;
					out_put(&p.out, t, tn);
					p.i += tn;
					seen_target = 1;
				} else if (word_is(w, wn, ".address_size")) {
					size_t an = next_word(&p);

					if (!word_is(p.s + p.i, an, "64"))
						return fail(&p, "address-size:%.*s", (int)(an < 8 ? an : 8), p.s + p.i),
						       free(p.out.p), -1;
					if (!seen_version || !seen_target)
						return fail(&p, "parse:header-order@line%d", line_of(&p)), free(p.out.p), -1;
					/* the rest of the line, then the fragment */
					for (j = p.i; j < p.n && p.s[j] != '\n' && p.s[j]; j++)
						;
					if (j < p.n && p.s[j] == '\n')
						j++;
					out_put(&p.out, p.s + p.i, j - p.i);
					p.i = j;
					if (p.out.len && p.out.p[p.out.len - 1] != '\n')
						out_puts(&p.out, "\n");
					out_puts(&p.out, "\n// ---- gpuext device probes: module fragment ----\n");
					out_put(&p.out, frag, strnlen(frag, frag_len));
					if (p.out.len && p.out.p[p.out.len - 1] != '\n')
						out_puts(&p.out, "\n");
					out_puts(&p.out, "// ---- end of gpuext fragment ----\n");
					frag_done = 1;
				} else if (word_is(w, wn, ".entry") || word_is(w, wn, ".func")) {
					if (!frag_done)
						return fail(&p, seen_version && seen_target ? "no-address-size" : "parse:no-header"),
						       free(p.out.p), -1;
					head = word_is(w, wn, ".entry") ? HEAD_ENTRY : HEAD_FUNC;
					if (head == HEAD_ENTRY) {
						size_t nn = next_word(&p);

						if (!nn)
							return fail(&p, "parse:entry-name@line%d", line_of(&p)), free(p.out.p),
							       -1;
						head_probe = probe_this(o, p.s + p.i, nn);
						head_kid = gx_kernel_id(p.s + p.i, nn);
						out_put(&p.out, p.s + p.i, nn);
						p.i += nn;
					}
				}
				continue;
			}
			if (in_body && pred) {
				/* the predicate of "@%p1 ret;": the opcode that follows still starts the statement */
				out_put(&p.out, w, wn);
				p.i = j;
				pred = 0;
				continue;
			}
			if (in_body && stmt_start) {
				size_t k = j;
				int label;

				while (k < p.n && (p.s[k] == ' ' || p.s[k] == '\t'))
					k++;
				label = k < p.n && p.s[k] == ':';
				if (want_call && !(depth == 1 && !label && is_decl(w, wn))) {
					emit_entry_call(&p, kid, (size_t)(w - p.s));
					want_call = 0;
				}
				if (!label && (word_is(w, wn, "ret") || word_is(w, wn, "ret.uni") || word_is(w, wn, "exit"))) {
					out_puts(&p.out, "bra " GX_PTX_EXIT_LABEL);
					p.i = j;
					stmt_start = 0;
					continue;
				}
			}
			out_put(&p.out, w, wn);
			p.i = j;
			stmt_start = 0;
			continue;
		}
		/* punctuation */
		p.i++;
		switch (c) {
		case '{':
			if (depth == 0 && head != HEAD_NONE) {
				res->entries += head == HEAD_ENTRY;
				in_body = head == HEAD_ENTRY && head_probe;
				want_call = in_body;
				kid = head_kid;
				head = HEAD_NONE;
			} else if (in_body && want_call && stmt_start) {
				emit_entry_call(&p, kid, p.i - 1);
				want_call = 0;
			}
			out_put(&p.out, &c, 1);
			depth++;
			stmt_start = 1;
			break;
		case '}':
			if (depth == 0)
				return fail(&p, "parse:unbalanced-brace@line%d", line_of(&p)), free(p.out.p), -1;
			if (in_body && want_call) {
				emit_entry_call(&p, kid, p.i - 1);
				want_call = 0;
			}
			if (in_body && depth == 1) {
				if (p.late_pending)
					return fail(&p, "late-entry-site-missed@line%d", line_of(&p)), free(p.out.p), -1;
				emit_exit_block(&p, kid);
				p.late_at = 0;
				p.late_site = 0;
				p.site++;
				res->probed++;
				in_body = 0;
			}
			out_put(&p.out, &c, 1);
			depth--;
			stmt_start = 1;
			break;
		case ';':
			if (depth == 0)
				head = HEAD_NONE; /* a prototype, not a definition */
			out_put(&p.out, &c, 1);
			stmt_start = 1;
			pred = 0;
			if (p.late_pending && p.i == p.late_at)
				emit_late_entry(&p);
			break;
		case ':':
			out_put(&p.out, &c, 1);
			stmt_start = 1;
			break;
		case '@':
			if (in_body && want_call && stmt_start) {
				emit_entry_call(&p, kid, p.i - 1);
				want_call = 0;
			}
			out_put(&p.out, &c, 1);
			pred = in_body && stmt_start;
			break;
		case '!':
			out_put(&p.out, &c, 1);
			break;
		default:
			out_put(&p.out, &c, 1);
			stmt_start = 0;
			break;
		}
	}
	if (p.out.oom) {
		free(p.out.p);
		snprintf(res->reason, sizeof(res->reason), "out-of-memory");
		return -1;
	}
	if (p.failed) {
		free(p.out.p);
		return -1;
	}
	if (depth != 0 || in_body)
		return fail(&p, "parse:unbalanced-brace@eof"), free(p.out.p), -1;
	if (!seen_version)
		return fail(&p, "parse:no-version"), free(p.out.p), -1;
	if (!seen_target)
		return fail(&p, "parse:no-target"), free(p.out.p), -1;
	if (!frag_done)
		return fail(&p, "no-address-size"), free(p.out.p), -1;
	if (!res->entries)
		return fail(&p, "no-entry"), free(p.out.p), -1;
	if (!res->probed)
		return fail(&p, "no-probed-kernel"), free(p.out.p), -1;
	res->text = p.out.p;
	res->len = p.out.len;
	return 0;
}

/* ---- module.conf ---- */

void gx_probe_conf_free(struct gx_probe_conf *c)
{
	for (size_t k = 0; k < c->opts.nkernels; k++)
		free(c->kernel_names[k]);
	free(c->kernel_names);
	free(c->maps);
	memset(c, 0, sizeof(*c));
}

static int conf_err(struct gx_probe_conf *c, char *err, size_t errlen, int line, const char *what)
{
	snprintf(err, errlen, GPUEXT_DEVRT_PROBES_CONF_FILE ":%d:%s", line, what);
	gx_probe_conf_free(c);
	return -1;
}

static int conf_parse_lines(const char *text, size_t len, struct gx_probe_conf *c, char *err, size_t errlen, char *buf);

int gx_probe_conf_parse(const char *text, size_t len, struct gx_probe_conf *c, char *err, size_t errlen)
{
	/*
	 * Lines of up to GX_CONF_MAX_LINE bytes (a kernel line holds a .entry
	 * name of up to GX_CONF_MAX_KERNEL_NAME bytes: CUTLASS names reach
	 * 1,456), read whole; a longer line is an error naming it, never cut
	 * (a cut kernel name matches no .entry: the probes would silently
	 * never attach).
	 */
	char *buf = malloc(GX_CONF_MAX_LINE + 1);
	int rc;

	if (!buf) {
		memset(c, 0, sizeof(*c));
		snprintf(err, errlen, GPUEXT_DEVRT_PROBES_CONF_FILE ":0:out-of-memory");
		return -1;
	}
	rc = conf_parse_lines(text, len, c, err, errlen, buf);
	free(buf);
	return rc;
}

static int conf_parse_lines(const char *text, size_t len, struct gx_probe_conf *c, char *err, size_t errlen, char *buf)
{
	size_t i = 0;
	int line = 0, version = 0, have_ptx = 0, have_target = 0;

	memset(c, 0, sizeof(*c));
	c->opts.entry_late = 1;
	snprintf(err, errlen, "ok");
	while (i < len && text[i]) {
		char *tok[5], *save = NULL, *hash;
		size_t j, n;
		int nt = 0;

		for (j = i; j < len && text[j] && text[j] != '\n'; j++)
			;
		line++;
		n = j - i;
		if (n > GX_CONF_MAX_LINE)
			return conf_err(c, err, errlen, line, "line-too-long");
		memcpy(buf, text + i, n);
		buf[n] = 0;
		i = j < len && text[j] == '\n' ? j + 1 : j;
		if ((hash = strchr(buf, '#')))
			*hash = 0;
		for (char *t = strtok_r(buf, " \t\r", &save); t && nt < 5; t = strtok_r(NULL, " \t\r", &save))
			tok[nt++] = t;
		if (!nt)
			continue;
		if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_VERSION) && nt == 2) {
			version = atoi(tok[1]);
			if (version != GX_CONF_VERSION)
				return conf_err(c, err, errlen, line, "unsupported-version");
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_MIN_PTX) && nt == 2) {
			if (parse_version(tok[1], strlen(tok[1]), &c->opts.min_ptx_major, &c->opts.min_ptx_minor) != 0)
				return conf_err(c, err, errlen, line, "bad-min_ptx");
			have_ptx = 1;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_MIN_TARGET) && nt == 2) {
			c->opts.min_target = atoi(tok[1]);
			if (c->opts.min_target <= 0)
				return conf_err(c, err, errlen, line, "bad-min_target");
			have_target = 1;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_LAUNCH_TIME) && nt == 2) {
			c->launch_time = atoi(tok[1]) != 0;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_KERNEL) && nt == 2) {
			char **k;

			if (strlen(tok[1]) > GX_CONF_MAX_KERNEL_NAME)
				return conf_err(c, err, errlen, line, "kernel-name-too-long");
			if (c->opts.nkernels >= GX_CONF_MAX_KERNELS)
				return conf_err(c, err, errlen, line, "too-many-kernels");
			k = realloc(c->kernel_names, (c->opts.nkernels + 1) * sizeof(*k));
			if (!k)
				return conf_err(c, err, errlen, line, "out-of-memory");
			c->kernel_names = k;
			if (!(k[c->opts.nkernels] = strdup(tok[1])))
				return conf_err(c, err, errlen, line, "out-of-memory");
			c->opts.nkernels++;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_MAP) && nt == 4) {
			struct gx_probe_map *m;
			char *end;

			if (c->nmaps >= GX_CONF_MAX_MAPS)
				return conf_err(c, err, errlen, line, "too-many-maps");
			if (strlen(tok[1]) >= sizeof(m->name) || strlen(tok[2]) >= sizeof(m->symbol))
				return conf_err(c, err, errlen, line, "map-name-too-long");
			m = realloc(c->maps, (c->nmaps + 1) * sizeof(*m));
			if (!m)
				return conf_err(c, err, errlen, line, "out-of-memory");
			c->maps = m;
			m += c->nmaps;
			memset(m, 0, sizeof(*m));
			strcpy(m->name, tok[1]);
			strcpy(m->symbol, tok[2]);
			m->bytes = strtoull(tok[3], &end, 10);
			if (*end || !m->bytes || m->bytes > (1ull << 31))
				return conf_err(c, err, errlen, line, "bad-map-size");
			c->nmaps++;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_HOST_WRITE) && nt == 4) {
			struct gx_probe_hostw *h;
			int v = !strcmp(tok[1], GPUEXT_DEVRT_HOSTW_LAUNCH_TIME_NAME)    ? GX_HOSTW_LAUNCH_TIME
				: !strcmp(tok[1], GPUEXT_DEVRT_HOSTW_CLOCK_OFFSET_NAME) ? GX_HOSTW_CLOCK_OFFSET
								  : 0;
			char *end;

			if (!v)
				continue; /* a value of a newer host: not written */
			if (c->nhostw >= GX_CONF_MAX_HOST_WRITES)
				return conf_err(c, err, errlen, line, "too-many-host-writes");
			h = &c->hostw[c->nhostw];
			if (strlen(tok[2]) >= sizeof(h->symbol))
				return conf_err(c, err, errlen, line, "host-write-symbol-too-long");
			h->value = v;
			strcpy(h->symbol, tok[2]);
			h->offset = strtoull(tok[3], &end, 10);
			if (*end || !*tok[3] || h->offset % 8 || h->offset > (1ull << 31))
				return conf_err(c, err, errlen, line, "bad-host-write-offset");
			c->nhostw++;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_INLINE) && nt == 2) {
			c->inline_form = atoi(tok[1]) == 1;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_ENTRY_LATE) && nt == 2) {
			c->opts.entry_late = atoi(tok[1]) != 0;
		} else if ((!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_GUARD_ENTRY) || !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_GUARD_EXIT)) && nt == 2) {
			/* an unknown value from a newer host is "none": always correct */
			int g = !strcmp(tok[1], GPUEXT_DEVRT_GUARD_THREAD0_NAME) ? GX_GUARD_THREAD0 : GX_GUARD_NONE;

			if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_GUARD_ENTRY))
				c->opts.guard_entry = g;
			else
				c->opts.guard_exit = g;
		} else if (!strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_VERSION) || !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_MIN_PTX) || !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_MIN_TARGET) ||
			   !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_LAUNCH_TIME) || !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_KERNEL) || !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_MAP) ||
			   !strcmp(tok[0], GPUEXT_DEVRT_CONF_KW_HOST_WRITE)) {
			return conf_err(c, err, errlen, line, "wrong-argument-count");
		}
	}
	if (version != GX_CONF_VERSION)
		return conf_err(c, err, errlen, line, "no-version");
	if (!have_ptx || !have_target)
		return conf_err(c, err, errlen, line, "no-min_ptx-or-min_target");
	c->opts.kernels = (const char *const *)c->kernel_names;
	return 0;
}
