/*
 * symbols — code addresses to function names, on the host thread (see
 * sampler.h).
 *
 * The process's modules come from dl_iterate_phdr: each has a load bias
 * (dlpi_addr; 0 for a non-PIE executable) and loaded segments. The first
 * lookup in a module maps its file read-only and reads its ELF section
 * headers: the function symbols of .symtab (or, in a stripped file,
 * .dynsym) are sorted by address into a table kept for the life of the
 * symbolizer, so each later lookup is a binary search of (pc - bias).
 * dladdr() is the fallback for modules without a readable file (the vDSO)
 * or a symbol the table lacks; glibc's dladdr walks every dynamic symbol of
 * the module, which is why it is not the first choice. C++ names are
 * demangled when the process has a demangler (src/util/demangle.h: the
 * C++ runtime's, looked up at run time, never loaded into a target) and
 * shortened to the function's name (no parameters, long template
 * arguments as "<...>"), once per symbol.
 */
#include "symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/demangle.h"
#include "../common/grow.h"

#define SYM_SEGS 16
#define SYM_NAME_MAX 1024

/* One function symbol of a module's table. */
struct sym {
	uint64_t addr, size;  /* in the file's address space */
	uint32_t name;        /* offset in the string table */
	uint32_t rank;        /* binding (global, weak, local) * 4 + leading
				 underscores: the lowest is preferred */
};

struct seg {
	uintptr_t lo, hi;
};

struct module {
	char *path;          /* file to read */
	char *label;         /* its base name, for "label+0x..." */
	uintptr_t bias;
	struct seg seg[SYM_SEGS];
	size_t nseg;
	bool live;           /* in the latest refresh */
	bool tried;          /* the table was loaded (or failed to) */
	bool unreadable;     /* offline: the file is not the one loaded */
	void *map;
	size_t map_len;
	const char *str;     /* string table inside map */
	size_t str_len;
	struct sym *syms;
	size_t nsyms;
	char **demangled;    /* per symbol, lazily */
};

struct symbols {
	struct module *mods;
	size_t n, cap;
	demangle_fn demangle;
	bool offline;        /* a gone process's: symbols_add_module only */
};

struct symbols *symbols_new(void)
{
	return calloc(1, sizeof(struct symbols));
}

struct symbols *symbols_new_offline(void)
{
	struct symbols *s = calloc(1, sizeof(struct symbols));

	if (s)
		s->offline = true;
	return s;
}

/* Frees a module's table and mapping (keeps path/label). */
static void module_drop_table(struct module *m)
{
	size_t i;

	if (m->demangled) {
		for (i = 0; i < m->nsyms; i++)
			free(m->demangled[i]);
		free(m->demangled);
	}
	free(m->syms);
	if (m->map)
		munmap(m->map, m->map_len);
	m->demangled = NULL;
	m->syms = NULL;
	m->nsyms = 0;
	m->map = NULL;
	m->str = NULL;
	m->tried = false;
}

void symbols_free(struct symbols *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->n; i++) {
		module_drop_table(&s->mods[i]);
		free(s->mods[i].path);
		free(s->mods[i].label);
	}
	free(s->mods);
	free(s);
}

/* ------------------------------------------------------------ modules */

struct refresh_ctx {
	struct symbols *s;
	int failed;
};

/* Base name of a path. */
static const char *base_of(const char *p)
{
	const char *slash = strrchr(p, '/');

	return slash ? slash + 1 : p;
}

/* dl_iterate_phdr callback: finds or adds the module, marks it live and
 * records its loaded segments. */
static int refresh_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct refresh_ctx *c = arg;
	struct symbols *s = c->s;
	const char *name = info->dlpi_name;
	char exe[4096];
	struct module *m = NULL;
	size_t i;

	(void)size;
	if (!name || !*name) {
		/* The main program. */
		ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);

		if (n <= 0)
			return 0;
		exe[n] = '\0';
		name = exe;
	}
	for (i = 0; i < s->n; i++)
		if (s->mods[i].bias == info->dlpi_addr &&
		    strcmp(s->mods[i].path, name) == 0) {
			m = &s->mods[i];
			break;
		}
	if (!m) {
		struct module *p = grow_array(s->mods, &s->cap, s->n + 1, sizeof *p, 32);

		if (!p) {
			c->failed = 1;
			return 1;
		}
		s->mods = p;
		m = &s->mods[s->n];
		memset(m, 0, sizeof *m);
		m->path = strdup(name);
		m->label = strdup(base_of(name));
		if (!m->path || !m->label) {
			free(m->path);
			free(m->label);
			c->failed = 1;
			return 1;
		}
		m->bias = info->dlpi_addr;
		s->n++;
	}
	m->live = true;
	m->nseg = 0;
	for (i = 0; i < info->dlpi_phnum && m->nseg < SYM_SEGS; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD)
			continue;
		m->seg[m->nseg].lo = info->dlpi_addr + ph->p_vaddr;
		m->seg[m->nseg].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		m->nseg++;
	}
	return 0;
}

int symbols_add_module(struct symbols *s, const char *path, uint64_t bias,
		       uint64_t lo, uint64_t hi, bool readable)
{
	struct module *m = grow_array(s->mods, &s->cap, s->n + 1, sizeof *m, 32);

	if (!m)
		return -1;
	s->mods = m;
	m = &s->mods[s->n];
	memset(m, 0, sizeof *m);
	m->path = strdup(path);
	m->label = strdup(base_of(path));
	if (!m->path || !m->label) {
		free(m->path);
		free(m->label);
		return -1;
	}
	m->bias = (uintptr_t)bias;
	m->seg[0].lo = (uintptr_t)lo;
	m->seg[0].hi = (uintptr_t)hi;
	m->nseg = 1;
	m->live = true;
	m->unreadable = !readable;
	m->tried = !readable;
	s->n++;
	return 0;
}

int symbols_refresh(struct symbols *s)
{
	struct refresh_ctx c = { s, 0 };
	size_t i, k;

	if (s->offline) {
		if (!s->demangle)
			s->demangle = demangle_find(true);
		return 0;
	}

	for (i = 0; i < s->n; i++)
		s->mods[i].live = false;
	dl_iterate_phdr(refresh_one, &c);
	/* Forget modules that were unloaded: their addresses may be reused. */
	for (i = k = 0; i < s->n; i++) {
		if (s->mods[i].live) {
			s->mods[k++] = s->mods[i];
			continue;
		}
		module_drop_table(&s->mods[i]);
		free(s->mods[i].path);
		free(s->mods[i].label);
	}
	s->n = k;
	if (!s->demangle)
		s->demangle = demangle_find(false);
	return c.failed ? -1 : 0;
}

/* The live module whose segments hold `pc`, or NULL; offline, the last
 * one added (the newest of modules loaded at one address in turn). */
static struct module *module_of(struct symbols *s, uintptr_t pc)
{
	size_t i, k;

	if (s->offline) {
		for (i = s->n; i-- > 0;)
			if (pc >= s->mods[i].seg[0].lo && pc < s->mods[i].seg[0].hi)
				return &s->mods[i];
		return NULL;
	}
	for (i = 0; i < s->n; i++)
		for (k = 0; k < s->mods[i].nseg; k++)
			if (pc >= s->mods[i].seg[k].lo && pc < s->mods[i].seg[k].hi)
				return &s->mods[i];
	return NULL;
}

/* ------------------------------------------------------------ ELF */

/* Orders symbols by address, the preferred name of an address first. */
static int sym_cmp(const void *pa, const void *pb)
{
	const struct sym *a = pa, *b = pb;

	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	if (a->size != b->size)
		return a->size > b->size ? -1 : 1;
	return 0;
}

/* Leading underscores of a name, at most 3: of two names for one address
 * (nanosleep, __nanosleep), the plainer one is shown. */
static uint32_t underscores(const char *s, size_t max)
{
	uint32_t n = 0;

	while (n < 3 && n < max && s[n] == '_')
		n++;
	return n;
}

/* Section header `i`, or NULL when it lies outside the file. */
static const ElfW(Shdr) *section(const char *base, size_t len,
				 const ElfW(Ehdr) *eh, size_t i)
{
	size_t off = eh->e_shoff + i * sizeof(ElfW(Shdr));

	if (eh->e_shoff == 0 || off < eh->e_shoff || off + sizeof(ElfW(Shdr)) > len)
		return NULL;
	return (const ElfW(Shdr) *)(base + off);
}

/* Reads the function symbols of the mapped ELF file into m->syms.
 * Returns 0, or -1 when the file is not a usable ELF file. */
static int parse_elf(struct module *m)
{
	const char *base = m->map;
	size_t len = m->map_len, shnum, i, n, k;
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
	const ElfW(Shdr) *symsec = NULL, *strsec, *sh0;
	const ElfW(Sym) *syms;

	if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	    eh->e_shentsize != sizeof(ElfW(Shdr)))
		return -1;
	shnum = eh->e_shnum;
	if (shnum == 0) { /* extended numbering: the count is in section 0 */
		sh0 = section(base, len, eh, 0);
		if (!sh0)
			return -1;
		shnum = sh0->sh_size;
	}
	for (i = 0; i < shnum; i++) {
		const ElfW(Shdr) *sh = section(base, len, eh, i);

		if (!sh)
			return -1;
		if (sh->sh_type == SHT_SYMTAB)
			symsec = sh;
		else if (sh->sh_type == SHT_DYNSYM && !symsec)
			symsec = sh;
	}
	if (!symsec || symsec->sh_entsize != sizeof(ElfW(Sym)) ||
	    symsec->sh_offset > len || symsec->sh_size > len - symsec->sh_offset ||
	    symsec->sh_link >= shnum)
		return -1;
	strsec = section(base, len, eh, symsec->sh_link);
	if (!strsec || strsec->sh_offset > len || strsec->sh_size > len - strsec->sh_offset)
		return -1;
	m->str = base + strsec->sh_offset;
	m->str_len = strsec->sh_size;
	syms = (const ElfW(Sym) *)(base + symsec->sh_offset);
	n = symsec->sh_size / sizeof *syms;
	m->syms = malloc((n ? n : 1) * sizeof *m->syms);
	if (!m->syms)
		return -1;
	for (i = k = 0; i < n; i++) {
		unsigned type = ELF64_ST_TYPE(syms[i].st_info);
		unsigned bind = ELF64_ST_BIND(syms[i].st_info);

		if ((type != STT_FUNC && type != STT_GNU_IFUNC) ||
		    syms[i].st_shndx == SHN_UNDEF || syms[i].st_value == 0 ||
		    syms[i].st_name == 0 || syms[i].st_name >= m->str_len)
			continue;
		m->syms[k].addr = syms[i].st_value;
		m->syms[k].size = syms[i].st_size;
		m->syms[k].name = syms[i].st_name;
		m->syms[k].rank = underscores(m->str + syms[i].st_name,
					      m->str_len - syms[i].st_name) +
				  4 * (bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2);
		k++;
	}
	m->nsyms = k;
	qsort(m->syms, m->nsyms, sizeof *m->syms, sym_cmp);
	/* Keep the preferred name of each address only. */
	for (i = k = 0; i < m->nsyms; i++)
		if (k == 0 || m->syms[k - 1].addr != m->syms[i].addr)
			m->syms[k++] = m->syms[i];
	m->nsyms = k;
	return 0;
}

/* Loads the module's symbol table once; a module whose file cannot be read
 * keeps an empty table. */
static void module_load(struct module *m)
{
	struct stat st;
	int fd;

	if (m->tried)
		return;
	m->tried = true;
	fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
		close(fd);
		return;
	}
	m->map_len = (size_t)st.st_size;
	m->map = mmap(NULL, m->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m->map == MAP_FAILED) {
		m->map = NULL;
		return;
	}
	if (parse_elf(m) != 0) {
		free(m->syms);
		m->syms = NULL;
		m->nsyms = 0;
		munmap(m->map, m->map_len);
		m->map = NULL;
		m->str = NULL;
	}
}

/* Index of the symbol holding file address `a`, or -1. */
static long sym_find(const struct module *m, uint64_t a)
{
	size_t lo = 0, hi = m->nsyms, back;

	while (lo < hi) { /* first symbol above a */
		size_t mid = lo + (hi - lo) / 2;

		if (m->syms[mid].addr <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* lo - 1 is the last symbol at or below a; an unsized one (assembly)
	 * extends to the next symbol, a sized one may be a label nested in a
	 * bigger function further back. */
	for (back = 0; back < 8 && lo > back; back++) {
		const struct sym *c = &m->syms[lo - 1 - back];

		if (c->size ? a < c->addr + c->size : back == 0)
			return (long)(lo - 1 - back);
	}
	return -1;
}

/* Copies `name` as a frame's name into out[size]: demangled and shortened
 * when it is a C++ name and a demangler exists, else as it is. `cache`
 * (may be NULL) keeps the result. */
static void put_name(struct symbols *s, const char *name, char **cache,
		     char *out, size_t size)
{
	if (cache && *cache) {
		snprintf(out, size, "%s", *cache);
		return;
	}
	if (!demangle_frame(s->demangle, name, out, size)) {
		snprintf(out, size, "%s", name);
		return;
	}
	if (cache)
		*cache = strdup(out);
}

int symbols_lookup(struct symbols *s, uint64_t pc, char *name, size_t size,
		   char *module, size_t msize)
{
	struct module *m = module_of(s, (uintptr_t)pc);
	Dl_info info;
	long i;

	if (msize)
		module[0] = '\0';
	if (m) {
		snprintf(module, msize, "%s", m->label);
		module_load(m);
		i = m->nsyms ? sym_find(m, pc - m->bias) : -1;
		if (i >= 0) {
			const char *n = m->str + m->syms[i].name;

			if (!m->demangled && s->demangle && demangle_is_mangled(n))
				m->demangled = calloc(m->nsyms, sizeof *m->demangled);
			if (strnlen(n, m->str_len - m->syms[i].name) <
			    m->str_len - m->syms[i].name) {
				put_name(s, n, m->demangled ? &m->demangled[i] : NULL,
					 name, size);
				return 2;
			}
		}
	}
	if (!s->offline && dladdr((void *)(uintptr_t)pc, &info) && info.dli_sname &&
	    info.dli_saddr && (uintptr_t)info.dli_saddr <= pc) {
		put_name(s, info.dli_sname, NULL, name, size);
		if (!m && info.dli_fname && msize)
			snprintf(module, msize, "%s", base_of(info.dli_fname));
		return 2;
	}
	if (m) {
		snprintf(name, size, "%s+0x%llx", m->label,
			 (unsigned long long)(pc - m->bias));
		return 1;
	}
	snprintf(name, size, "0x%llx", (unsigned long long)pc);
	return 0;
}

/* The symbol of a known size holding `pc`: its index in *mp's table, or
 * -1 (no module, no symbol, or a symbol without a size). */
static long sym_at(struct symbols *s, uint64_t pc, struct module **mp)
{
	struct module *m = module_of(s, (uintptr_t)pc);
	long i;

	if (!m)
		return -1;
	module_load(m);
	i = m->nsyms ? sym_find(m, pc - m->bias) : -1;
	if (i < 0 || m->syms[i].size == 0)
		return -1;
	*mp = m;
	return i;
}

int symbols_range(struct symbols *s, uint64_t pc, uint64_t *lo, uint64_t *hi)
{
	struct module *m = NULL;
	long i = sym_at(s, pc, &m);

	if (i < 0)
		return -1;
	*lo = m->syms[i].addr + m->bias;
	*hi = *lo + m->syms[i].size;
	return 0;
}

/* The name of symbol `i` of m, or "" when it does not end inside the
 * string table. */
static const char *sym_name(const struct module *m, size_t i)
{
	uint32_t off = m->syms[i].name;

	if (off >= m->str_len || strnlen(m->str + off, m->str_len - off) == m->str_len - off)
		return "";
	return m->str + off;
}

/* True when symbol `i` of m bounds a cluster: global or weak, and not a
 * member. */
static bool cluster_stop(const struct module *m, size_t i,
			 bool (*member)(const char *name))
{
	return m->syms[i].rank / 4 < 2 && !member(sym_name(m, i));
}

int symbols_cluster_range(struct symbols *s, uint64_t pc,
			  bool (*member)(const char *name), uint64_t *lo,
			  uint64_t *hi)
{
	struct module *m = NULL;
	long i = sym_at(s, pc, &m), k;

	if (i < 0)
		return -1;
	*lo = m->syms[i].addr;
	*hi = m->syms[i].addr + m->syms[i].size;
	for (k = i - 1; k >= 0; k--) {
		if (cluster_stop(m, (size_t)k, member)) {
			if (m->syms[k].size &&
			    m->syms[k].addr + m->syms[k].size <= *lo)
				*lo = m->syms[k].addr + m->syms[k].size;
			break;
		}
		*lo = m->syms[k].addr;
	}
	for (k = i + 1; k < (long)m->nsyms; k++) {
		if (cluster_stop(m, (size_t)k, member)) {
			*hi = m->syms[k].addr;
			break;
		}
		if (m->syms[k].addr + m->syms[k].size > *hi)
			*hi = m->syms[k].addr + m->syms[k].size;
	}
	*lo += m->bias;
	*hi += m->bias;
	return 0;
}

/* ------------------------------------------------------------ traces */

struct corr {
	uint64_t id;
	uint32_t stack;
};

/* Orders (correlation id, stack) pairs by id. */
static int corr_cmp(const void *pa, const void *pb)
{
	const struct corr *a = pa, *b = pb;

	return a->id < b->id ? -1 : a->id > b->id;
}

/* Folds every stack into t (stack.folded). 0 or -1. */
static int fold_stacks(struct trace *t)
{
	size_t i, cap = 4096, n;
	char *buf = malloc(cap), *p;

	if (!buf)
		return -1;
	for (i = 0; i < t->nstacks; i++) {
		n = trace_stack_fold(t, &t->stacks[i], buf, cap);
		if (n + 1 > cap) {
			p = realloc(buf, n + 1);
			if (!p)
				break;
			buf = p;
			cap = n + 1;
			n = trace_stack_fold(t, &t->stacks[i], buf, cap);
		}
		t->stacks[i].folded = trace_intern(t, buf, n);
		if (t->stacks[i].folded == STRTAB_NONE)
			break;
	}
	free(buf);
	return i == t->nstacks ? 0 : -1;
}

/* Stack placeholders become folded strings. */
static void resolve_placeholders(struct trace *t)
{
	uint32_t key = trace_intern(t, TRACE_ARG_STACK, strlen(TRACE_ARG_STACK));
	size_t i;

	if (key == STRTAB_NONE)
		return;
	for (i = 0; i < t->nargs; i++) {
		struct trace_arg *a = &t->args[i];

		if (a->key == key && a->type == TRACE_ARG_UINT && a->v.u < t->nstacks) {
			uint32_t folded = t->stacks[a->v.u].folded;

			a->type = TRACE_ARG_STR;
			a->v.str = folded;
		}
	}
}

/* Attaches each CUDA stack to the API event with its correlation id. */
static int attach_cuda_stacks(struct trace *t)
{
	struct corr *c;
	size_t i, n = 0, nev = t->nev;
	int rc = 0;

	for (i = 0; i < t->nstacks; i++)
		n += t->stacks[i].kind == TRACE_STACK_CUDA;
	if (n == 0)
		return 0;
	c = malloc(n * sizeof *c);
	if (!c)
		return -1;
	for (i = n = 0; i < t->nstacks; i++)
		if (t->stacks[i].kind == TRACE_STACK_CUDA) {
			c[n].id = t->stacks[i].id;
			c[n].stack = (uint32_t)i;
			n++;
		}
	qsort(c, n, sizeof *c, corr_cmp);
	for (i = 0; i < nev && rc == 0; i++) {
		const struct trace_event *e = &t->ev[i];
		struct corr key, *hit;

		if (!e->id || (e->cat != TRACE_CAT_CUDA_RUNTIME &&
			       e->cat != TRACE_CAT_CUDA_DRIVER &&
			       e->cat != TRACE_CAT_CUDA_SYNC) ||
		    e->ph != TRACE_PH_COMPLETE)
			continue;
		key.id = e->id;
		hit = bsearch(&key, c, n, sizeof *c, corr_cmp);
		if (hit) {
			uint32_t f = t->stacks[hit->stack].folded;

			rc = trace_arg_str_at(t, i, TRACE_ARG_STACK, trace_str(t, f),
					      strtab_len(&t->names, f));
		}
	}
	free(c);
	return rc;
}

int symbols_resolve_trace(struct symbols *s, struct trace *t)
{
	char name[SYM_NAME_MAX], module[256];
	size_t i;

	if (symbols_refresh(s) != 0)
		return -1;
	for (i = 0; i < t->nframes && !t->oom; i++) {
		struct trace_frame *f = &t->frames[i];

		if (f->name != STRTAB_NONE)
			continue; /* named by its source (Python frames) */
		symbols_lookup(s, f->pc, name, sizeof name, module, sizeof module);
		f->name = trace_intern(t, name, strlen(name));
		f->module = module[0] ? trace_intern(t, module, strlen(module))
				      : STRTAB_NONE;
	}
	if (t->oom || fold_stacks(t) != 0)
		return -1;
	resolve_placeholders(t);
	return attach_cuda_stacks(t) != 0 || t->oom ? -1 : 0;
}

int symbols_sample_events(struct trace *t, uint64_t *periods)
{
	size_t i, cap = 4096, n;
	char *buf = malloc(cap), *p;
	int rc = 0;

	*periods = 0;
	if (!buf)
		return -1;
	for (i = 0; i < t->nstacks && rc == 0; i++) {
		const struct trace_stack *s = &t->stacks[i];
		const struct trace_frame *leaf;
		struct trace_event e = { 0 };
		const char *stack;
		char hex[24];

		if (s->kind != TRACE_STACK_SAMPLE || s->depth == 0)
			continue;
		*periods += s->weight;
		leaf = &t->frames[t->stack_frames[s->first]];
		e.ts = s->ts;
		e.pid = t->meta.pid;
		e.tid = s->tid;
		e.cat = TRACE_CAT_SAMPLE;
		e.ph = TRACE_PH_INSTANT;
		if (leaf->name != STRTAB_NONE) {
			e.name = leaf->name;
		} else {
			n = (size_t)snprintf(hex, sizeof hex, "0x%llx",
					     (unsigned long long)leaf->pc);
			e.name = trace_intern(t, hex, n);
		}
		if (s->folded != STRTAB_NONE) {
			stack = trace_str(t, s->folded);
			n = strtab_len(&t->names, s->folded);
		} else {
			n = trace_stack_fold(t, s, buf, cap);
			if (n + 1 > cap) {
				p = realloc(buf, n + 1);
				if (!p) {
					rc = -1;
					break;
				}
				buf = p;
				cap = n + 1;
				trace_stack_fold(t, s, buf, cap);
			}
			stack = buf;
		}
		if (e.name == STRTAB_NONE || !trace_add_event(t, &e) ||
		    trace_arg_str(t, TRACE_ARG_STACK, stack, n) != 0 ||
		    trace_arg_uint(t, TRACE_ARG_WEIGHT, s->weight) != 0 ||
		    ((s->flags & TRACE_STACK_TRUNCATED) &&
		     trace_arg_uint(t, "truncated", 1) != 0))
			rc = -1;
	}
	free(buf);
	return rc;
}
