/*
 * salvage_read — reading a salvage file (see salvage_read.h and
 * src/common/salvfile.h for the layout and the torn-record rule).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cupti_salvage.h"
#include "../stacks/pymerge.h"
#include "../stacks/symbols.h"
#include "../events/assemble.h"
#include "../common/evchunk.h"
#include "../common/grow.h"
#include "salvage_read.h"

/* The file salvage_build() drains (see the header: one at a time). */
static struct salvage_file *salvage_current;

/* Its NVTX names (salvfile.h, struct salv_name), NUL-ended copies; a
 * later entry for the same key renames it. */
struct salv_named {
	uint32_t kind, domain, category;
	char *text;
};
static struct salv_named *salvage_names;
static size_t salvage_nnames;

/* Reads the file's NVTX names into salvage_names. 0, or -1 when memory
 * ran out. A damaged record ends the list. */
static int names_load(const struct salv_header *hd)
{
	uint32_t used = atomic_load_explicit(&hd->names_used, memory_order_acquire), off = 0;
	size_t cap = 0;

	salvage_names = NULL;
	salvage_nnames = 0;
	if (used > SALV_NAMES_BYTES)
		used = SALV_NAMES_BYTES;
	while (used - off >= sizeof(struct salv_name)) {
		struct salv_name r;
		struct salv_named *p;

		memcpy(&r, hd->names + off, sizeof r);
		if (r.len > used - off - sizeof r ||
		    (r.kind != SALV_NAME_DOMAIN && r.kind != SALV_NAME_CATEGORY))
			break;
		p = grow_array(salvage_names, &cap, salvage_nnames + 1, sizeof *p, 64);
		if (!p)
			return -1;
		salvage_names = p;
		p = &salvage_names[salvage_nnames];
		p->kind = r.kind;
		p->domain = r.domain;
		p->category = r.category;
		p->text = strndup(hd->names + off + sizeof r, r.len);
		if (!p->text)
			return -1;
		salvage_nnames++;
		off += (uint32_t)((sizeof r + r.len + 3) & ~(size_t)3);
	}
	return 0;
}

/* Frees salvage_names. */
static void names_free(void)
{
	size_t i;

	for (i = 0; i < salvage_nnames; i++)
		free(salvage_names[i].text);
	free(salvage_names);
	salvage_names = NULL;
	salvage_nnames = 0;
}

/* The latest name of kind `kind` for (domain, category), or NULL. */
static const char *names_find(uint32_t kind, uint32_t domain, uint32_t category)
{
	size_t i;

	for (i = salvage_nnames; i-- > 0;)
		if (salvage_names[i].kind == kind && salvage_names[i].domain == domain &&
		    salvage_names[i].category == category)
			return salvage_names[i].text;
	return NULL;
}

/* assemble_source.domain_name over the salvaged names. */
static const char *salvage_domain_name(uint32_t id)
{
	return names_find(SALV_NAME_DOMAIN, id, 0);
}

/* assemble_source.category_name over the salvaged names. */
static const char *salvage_category_name(uint32_t domain, uint32_t category)
{
	return names_find(SALV_NAME_CATEGORY, domain, category);
}

/* Checks that every slot region lies in the file. Returns 0 or -1 with *e. */
static int check_slots(const struct salvage_file *f, struct err *e)
{
	uint32_t i;

	for (i = 0; i < SALV_SLOTS; i++) {
		const struct salv_slot *s = &f->hd->slots[i];
		uint64_t gen = atomic_load_explicit(&s->gen, memory_order_acquire);

		if (!gen || salv_slot_kept_out(s))
			continue; /* none, or kept out of the file */
		if (s->off < SALV_HEADER_BYTES || s->bytes % EVBUF_CHUNK_BYTES ||
		    s->off > f->size || s->bytes > f->size - s->off)
			return err_set(e, "'%s' is truncated or damaged: its event pool %u "
				       "lies past its end (%llu bytes); nothing can be "
				       "salvaged from it", f->path, i,
				       (unsigned long long)f->size);
	}
	return 0;
}

/* The refusal of a salvage file `path` (st) that is not the caller's: what
 * it says is another user's word (where to write, which files to read
 * symbols from), so root too reads only its own. Returns -1 with *e. */
static int not_owner(const char *path, const struct stat *st, struct err *e)
{
	char owner[128], me[128], buf[1024];
	struct passwd pw, *res = NULL;

	if (getpwuid_r(st->st_uid, &pw, buf, sizeof buf, &res) == 0 && res)
		snprintf(owner, sizeof owner, "%s (uid %u)", res->pw_name, (unsigned)st->st_uid);
	else
		snprintf(owner, sizeof owner, "uid %u", (unsigned)st->st_uid);
	res = NULL;
	if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res)
		snprintf(me, sizeof me, "%s, uid %u", res->pw_name, (unsigned)geteuid());
	else
		snprintf(me, sizeof me, "uid %u", (unsigned)geteuid());
	return err_set(e, "'%s' belongs to %s, not to you (%s): a salvage file is read "
		       "only by the user whose process wrote it (salvage it as that user, "
		       "or remove it)", path, owner, me);
}

int salvage_open(const char *path, struct salvage_file *f, struct err *e)
{
	struct stat st;
	void *m;
	uint32_t cur;

	memset(f, 0, sizeof *f);
	f->path = path;
	/* O_NONBLOCK: a FIFO is refused below instead of blocking the open */
	f->fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (f->fd < 0 && errno == ELOOP)
		return err_set(e, "'%s' is a symbolic link; give the path of the "
			       "salvage file itself (links are not followed)", path);
	if (f->fd < 0)
		return err_errno(e, errno, "cannot open salvage file '%s'", path);
	if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(f->fd);
		return err_set(e, "'%s' is not a regular file; give the path of a "
			       "profhost-<pid>-<time>.salvage file", path);
	}
	if (st.st_uid != geteuid()) {
		close(f->fd);
		return not_owner(path, &st, e);
	}
	if ((uint64_t)st.st_size < 8) {
		close(f->fd);
		return err_set(e, "'%s' is not a profhost salvage file (%lld bytes)",
			       path, (long long)st.st_size);
	}
	f->size = (uint64_t)st.st_size;
	m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
	if (m == MAP_FAILED) {
		err_errno(e, errno, "cannot map salvage file '%s'", path);
		close(f->fd);
		return -1;
	}
	f->map = m;
	f->hd = m;
	if (memcmp(f->hd->magic, SALV_MAGIC, 8) != 0) {
		err_set(e, "'%s' is not a profhost salvage file", path);
		goto fail;
	}
	if (f->size < SALV_HEADER_BYTES) {
		err_set(e, "'%s' is truncated: %llu bytes, less than its %llu-byte "
			"header; nothing can be salvaged from it", path,
			(unsigned long long)f->size, (unsigned long long)SALV_HEADER_BYTES);
		goto fail;
	}
	if (f->hd->version != SALV_VERSION || f->hd->header_bytes != SALV_HEADER_BYTES ||
	    f->hd->chunk_bytes != EVBUF_CHUNK_BYTES) {
		err_set(e, "'%s' is a salvage file of version %u; this prof reads "
			"version %u (use the prof of the profhost that wrote it)", path,
			f->hd->version, SALV_VERSION);
		goto fail;
	}
	/* The writer holds the lock for its life; so does a reader (another
	 * prof salvage, or the launcher) while it salvages the file. */
	if (flock(f->fd, LOCK_EX | LOCK_NB) != 0) {
		if (f->hd->pid > 0 && kill((pid_t)f->hd->pid, 0) != 0 && errno == ESRCH)
			err_set(e, "'%s' is being salvaged by another prof (process %d, "
				"which wrote it, has ended; the file's lock is held): "
				"let that one finish", path, (int)f->hd->pid);
		else
			err_set(e, "'%s' belongs to process %d, which is still running: "
				"it writes its own windows (salvage the file once the "
				"process has ended)", path, (int)f->hd->pid);
		goto fail;
	}
	if (!atomic_load_explicit(&f->hd->ident_ok, memory_order_acquire)) {
		err_set(e, "'%s' is incomplete: process %d ended before profhost had "
			"started in it; nothing was recorded", path, (int)f->hd->pid);
		goto fail;
	}
	if (check_slots(f, e) != 0)
		goto fail;
	cur = atomic_load_explicit(&f->hd->state_cur, memory_order_acquire) & 1;
	f->st = f->hd->state[cur];
	if (f->st.ngens > SALV_GENS)
		f->st.ngens = SALV_GENS;
	if (f->st.start_ts < 0)
		f->st.start_ts = 0; /* damaged: clock times are never negative */
	f->st.reason[sizeof f->st.reason - 1] = '\0';
	return 0;
fail:
	salvage_close(f);
	return -1;
}

int salvage_recording(const struct salvage_file *f)
{
	return f->st.kind == SALV_WINDOW || f->st.kind == SALV_RECORDER;
}

/* Counts the records a drain finds and the latest time among them, and
 * keeps the Python snapshots (EVBUF_PYSTACK). */
struct scan {
	int64_t last_ts;
	struct pymerge_set py;
};

static void scan_visit(void *ctx, int32_t tid, const char *name,
		       const struct evbuf_rec *r)
{
	struct scan *s = ctx;

	(void)tid;
	(void)name;
	if (r->kind == EVBUF_PYSTACK) { /* merged after assembly; one memory
					   ran out for is dropped (counted) */
		pymerge_set_add(&s->py, (int32_t)r->id, r->ts, evbuf_payload(r), r->len,
				PYMERGE_MAX_BYTES);
		return;
	}
	if (r->ts > s->last_ts)
		s->last_ts = r->ts;
}

/* The salvage file's evbuf_drain: visits generation `gen`'s records as
 * the in-process drain does, counting in salvage_current->torn each chunk
 * that ends in a record not published (its first word written, `used`
 * not moved past it) or not valid. */
static int salvage_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
			 struct evbuf_stats *stats)
{
	struct salvage_file *f = salvage_current;
	const struct salv_slot *s;
	struct evchunk_expanded *x;
	uint64_t i, n;

	memset(stats, 0, sizeof *stats);
	if (!f || !gen)
		return -1;
	s = &f->hd->slots[gen % SALV_SLOTS];
	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen)
		return -1; /* given back, or never in the file */
	x = malloc(sizeof *x);
	if (!x)
		return -1;
	n = s->bytes / EVBUF_CHUNK_BYTES;
	for (i = 0; i < n; i++) {
		const struct evbuf_chunk *c =
			(const struct evbuf_chunk *)(f->map + s->off + i * EVBUF_CHUNK_BYTES);
		uint32_t used = atomic_load_explicit(&c->used, memory_order_acquire);
		int bad = 0;
		uint64_t tail = 0;

		if (used > EVBUF_CHUNK_DATA) {
			f->torn++; /* a damaged header: the chunk is skipped */
			continue;
		}
		if (used + sizeof tail <= EVBUF_CHUNK_DATA)
			memcpy(&tail, (const char *)(c + 1) + used, sizeof tail);
		if (tail)
			f->torn++; /* the record being written when it died */
		if (used == 0)
			continue;
		stats->chunks++;
		stats->bytes += used;
		stats->records += evchunk_walk(c, used, fn, ctx, NULL, NULL, x, &bad);
		if (bad)
			f->torn++;
	}
	free(x);
	return 0;
}

/* The note that says the recording's pools not in the file lost their
 * records, into line[size] ("" when every pool is there). */
static void pools_out_note(const struct salvage_file *f, char *line, size_t size)
{
	line[0] = '\0';
	if (!f->pools_out)
		return;
	if (f->st.kind == SALV_WINDOW)
		snprintf(line, size, "events: the window's event pool was not in the "
			 "salvage file (its tmpfs had no room for it when the window "
			 "opened): its records are lost, only its steps are salvaged "
			 "(give PROF_SALVAGE_DIR's tmpfs, /dev/shm under prof run, more "
			 "free room than prof.capture{ buffer_mb } plus the quarter of "
			 "it, at least 64 MiB, that profhost leaves the program)");
	else
		snprintf(line, size, "events: %u of the recorder's %u segments were not "
			 "in the salvage file (its tmpfs had no room for their event "
			 "pools): their records are lost, their steps show without them "
			 "(give PROF_SALVAGE_DIR's tmpfs, /dev/shm under prof run, more "
			 "free room than prof.recorder{ mb } plus the quarter of it, at "
			 "least 64 MiB, that profhost leaves the program)", f->pools_out,
			 f->st.ngens);
}

/* The steps the file holds for its recording, in order, into *out (malloc'd),
 * plus the step the process died in, partial, ending at `last_ts`. Returns
 * the count, or -1 when memory ran out. */
static long salvage_steps(const struct salvage_file *f, int64_t last_ts,
			  struct trace_step **out)
{
	uint64_t n = atomic_load_explicit(&f->hd->nsteps, memory_order_acquire);
	uint64_t i = n > SALV_STEPS ? n - SALV_STEPS : 0;
	struct trace_step *v = malloc((SALV_STEPS + 1) * sizeof *v);
	int64_t end = f->st.start_ts;
	uint64_t next = f->st.first_step;
	int32_t tid = 0;
	long k = 0;

	if (!v)
		return -1;
	for (; i < n; i++) {
		const struct salv_step *s = &f->hd->steps[i % SALV_STEPS];
		int64_t ts = s->ts, e;

		/* a damaged entry (clock times are never negative) */
		if (s->dur < 0 || ts < 0 || ts > INT64_MAX - s->dur)
			continue;
		e = ts + s->dur;
		if (e <= f->st.start_ts || s->step < f->st.first_step)
			continue; /* before this recording */
		if (ts < f->st.start_ts)
			ts = f->st.start_ts;
		v[k].step = s->step;
		v[k].ts = ts;
		v[k].dur = e - ts;
		v[k].tid = s->tid;
		v[k].partial = 0;
		k++;
		end = e;
		next = s->step + 1;
		tid = s->tid;
	}
	if (last_ts > end) {
		v[k].step = next;
		v[k].ts = end;
		v[k].dur = last_ts - end;
		v[k].tid = tid;
		v[k].partial = 1;
		k++;
	}
	*out = v;
	return k;
}

/* The GNU build-id of the ELF file mapped at map[0, len) (its PT_NOTE
 * segments) into out[SALV_BUILD_ID_MAX]; returns its length, 0: none. */
static uint32_t file_build_id(const unsigned char *map, size_t len, uint8_t *out)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;
	uint32_t i, n;

	if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_phentsize != sizeof(Elf64_Phdr) ||
	    eh->e_phoff > len || (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > len - eh->e_phoff)
		return 0;
	for (i = 0; i < eh->e_phnum; i++) {
		const Elf64_Phdr *ph = (const Elf64_Phdr *)(map + eh->e_phoff) + i;

		if (ph->p_type != PT_NOTE || ph->p_offset > len ||
		    ph->p_filesz > len - ph->p_offset)
			continue;
		n = salv_note_build_id(map + ph->p_offset, ph->p_filesz, out);
		if (n)
			return n;
	}
	return 0;
}

/* True when the file at `path` is still the one the process loaded as
 * module m: the same build-id when it had one, else the same device,
 * inode, size and modification time. */
static bool module_same_file(const struct salv_module *m, const char *path)
{
	uint8_t id[SALV_BUILD_ID_MAX];
	struct stat st;
	bool same = false;
	void *map;
	int fd;

	if (!m->ino)
		return false; /* no file (the vDSO) */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
		close(fd);
		return false;
	}
	if (!m->build_id_len) {
		close(fd);
		return (uint64_t)st.st_dev == m->dev && (uint64_t)st.st_ino == m->ino &&
		       (uint64_t)st.st_size == m->size &&
		       (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec ==
		       m->mtime_ns;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return false;
	same = file_build_id(map, (size_t)st.st_size, id) == m->build_id_len &&
	       memcmp(id, m->build_id, m->build_id_len) == 0;
	munmap(map, (size_t)st.st_size);
	return same;
}

/* Appends `s` to the trace's notes line being built in buf[size]. */
static void note_append(char *buf, size_t size, const char *s)
{
	size_t n = strlen(buf), k = strlen(s);

	if (k > size - 1 - n)
		k = size - 1 - n;
	memcpy(buf + n, s, k);
	buf[n + k] = '\0';
}

/* Names the stacks of `t` from the modules the file's table holds, read
 * from their files on disk, and adds the timer samples as events with the
 * recording's sampling settings. A module whose file is gone or was
 * replaced keeps its frames as "<module>+0x<offset>", said once in a
 * note. 0, or -1 when memory ran out. */
static int name_stacks(const struct salvage_file *f, struct trace *t)
{
	const struct salv_header *hd = f->hd;
	uint32_t n = atomic_load_explicit(&hd->nmods, memory_order_acquire), i;
	struct symbols *s;
	char path[4096], note[1024] = "", *changed = NULL;
	size_t nchanged = 0;
	uint64_t periods;
	int rc = 0;

	if (n > SALV_MODULES)
		n = SALV_MODULES;
	t->sampling.hz = f->st.hz;
	t->sampling.depth = f->st.depth;
	t->sampling.period_ns = f->st.hz ? 1000000000 / f->st.hz : 0;
	t->sampling.wall_clock = f->st.wall_clock != 0;
	t->sampling.signal = atomic_load_explicit(&hd->sample_signal, memory_order_relaxed);
	if (t->nstacks == 0)
		return 0;
	s = symbols_new_offline();
	if (!s)
		return -1;
	changed = calloc(n ? n : 1, 1);
	if (!changed) {
		symbols_free(s);
		return -1;
	}
	for (i = 0; i < n && rc == 0; i++) {
		const struct salv_module *m = &hd->mods[i];
		bool same;

		if (m->path_len == 0 || m->path_off > SALV_MOD_PATHS ||
		    m->path_len > SALV_MOD_PATHS - m->path_off || m->path_len >= sizeof path ||
		    m->hi <= m->lo)
			continue;
		memcpy(path, hd->mod_paths + m->path_off, m->path_len);
		path[m->path_len] = '\0';
		same = module_same_file(m, path);
		changed[i] = !same && m->ino;
		rc = symbols_add_module(s, path, m->bias, m->lo, m->hi, same);
	}
	/* the modules that hold frames and could not be read, named once */
	for (i = 0; i < n && rc == 0; i++) {
		const struct salv_module *m = &hd->mods[i];
		size_t k;

		if (!changed[i])
			continue;
		for (k = 0; k < t->nframes; k++)
			if (t->frames[k].name == STRTAB_NONE && t->frames[k].pc >= m->lo &&
			    t->frames[k].pc < m->hi)
				break;
		if (k == t->nframes)
			continue;
		memcpy(path, hd->mod_paths + m->path_off, m->path_len);
		path[m->path_len] = '\0';
		note_append(note, sizeof note, nchanged++ ? ", " : "");
		note_append(note, sizeof note, path);
	}
	if (rc == 0)
		rc = symbols_resolve_trace(s, t);
	if (rc == 0)
		rc = symbols_sample_events(t, &periods);
	if (rc == 0 && nchanged) {
		char line[1200];

		snprintf(line, sizeof line, "CPU stacks: %zu module%s changed or removed "
			 "since the process loaded %s (%s): %s frames stay addresses",
			 nchanged, nchanged == 1 ? "" : "s", nchanged == 1 ? "it" : "them",
			 note, nchanged == 1 ? "its" : "their");
		rc = trace_add_note(t, line);
	}
	if (rc == 0 && hd->mods_lost) {
		char line[200];

		snprintf(line, sizeof line, "CPU stacks: %u modules did not fit the salvage "
			 "file's table; their frames are addresses", hd->mods_lost);
		rc = trace_add_note(t, line);
	}
	free(changed);
	symbols_free(s);
	return rc;
}

int salvage_build(struct salvage_file *f, const char *how, struct trace *t,
		  struct err *e)
{
	struct assemble_source src = { .drain = salvage_drain,
				       .domain_name = salvage_domain_name,
				       .category_name = salvage_category_name,
				       .gens = f->st.gens, .ngens = f->st.ngens,
				       .clip_start = true }; /* no budget: the file's
							       records, all */
	const struct salv_header *hd = f->hd;
	const char *run = strrchr(hd->run_dir, '/');
	struct trace_step *steps = NULL;
	struct scan sc = { .last_ts = f->st.start_ts };
	struct evbuf_stats stats;
	char line[600];
	uint64_t torn;
	long n;
	uint32_t i;
	int rc;

	salvage_current = f;
	/* First pass: the latest record (where the last, partial step ends),
	 * the torn records, counted once, and the Python snapshots. */
	f->torn = 0;
	f->pools_out = 0;
	for (i = 0; i < f->st.ngens; i++) {
		/* a pool the writer could not map from the file (its tmpfs
		 * had no room) stayed anonymous memory and died with it */
		if (salv_gen_kept_out(f->hd->slots, f->st.gens[i]))
			f->pools_out++;
		salvage_drain(f->st.gens[i], scan_visit, &sc, &stats);
	}
	torn = f->torn;
	f->last_ts = sc.last_ts;
	n = salvage_steps(f, sc.last_ts, &steps);
	if (n < 0) {
		salvage_current = NULL;
		pymerge_set_free(&sc.py);
		return err_set(e, "out of memory salvaging '%s'", f->path);
	}
	t->meta.rank = hd->rank;
	t->meta.world_size = hd->world_size;
	t->meta.window = f->st.index;
	t->meta.first_step = n ? steps[0].step : f->st.first_step;
	t->meta.last_step = n ? steps[n - 1].step : f->st.first_step;
	t->meta.start_ts = f->st.start_ts;
	t->meta.end_ts = n ? steps[n - 1].ts + steps[n - 1].dur : sc.last_ts;
	if (t->meta.end_ts < sc.last_ts)
		t->meta.end_ts = sc.last_ts;
	t->meta.base_time_ns = f->st.base_time_ns;
	t->meta.pid = hd->pid;
	t->meta.program = strndup(hd->program, sizeof hd->program);
	t->meta.hostname = strndup(hd->hostname, sizeof hd->hostname);
	t->meta.run = strndup(run ? run + 1 : hd->run_dir, sizeof hd->run_dir);
	snprintf(line, sizeof line, "%s, salvaged %s", f->st.reason, how);
	t->meta.reason = strdup(line);
	t->meta.recorder = f->st.kind == SALV_RECORDER;
	rc = names_load(hd);
	if (rc == 0)
		rc = assemble_window(t, &src, steps, (size_t)n);
	names_free();
	/* the recorder's GPU records, named from the file (cupti_salvage.h) */
	if (rc == 0)
		rc = cupti_salvage_convert(hd, t->meta.start_ts, t->meta.end_ts, t);
	trace_raw_free(t);
	/* Python frames into the samples' stacks, before they are named */
	if (pymerge_stacks(sc.py.v, sc.py.n, sc.py.text, atomic_load(&hd->py_eval_lo),
			   atomic_load(&hd->py_eval_hi),
			   f->st.hz < PYMERGE_MAX_HZ ? f->st.hz : PYMERGE_MAX_HZ, t) < 0 &&
	    rc == 0)
		rc = err_set(e, "out of memory merging the Python stacks");
	pymerge_set_free(&sc.py);
	if (rc == 0)
		rc = name_stacks(f, t);
	pools_out_note(f, line, sizeof line);
	if (rc == 0 && line[0])
		rc = trace_add_note(t, line);
	if (rc == 0 && hd->names_lost) {
		snprintf(line, sizeof line, "NVTX: %u domain or category names did not fit "
			 "the salvage file; those show as numbers", hd->names_lost);
		rc = trace_add_note(t, line);
	}
	f->torn = torn;
	free(steps);
	salvage_current = NULL;
	snprintf(line, sizeof line, "salvaged %s from process %d's salvage file: "
		 "%llu torn records dropped", how, (int)hd->pid, (unsigned long long)torn);
	if (!t->meta.program || !t->meta.hostname || !t->meta.run || !t->meta.reason ||
	    trace_add_note(t, line) != 0 || rc != 0)
		return err_set(e, "out of memory salvaging '%s'", f->path);
	return 0;
}

void salvage_close(struct salvage_file *f)
{
	if (f->map)
		munmap((void *)f->map, f->size);
	if (f->fd >= 0)
		close(f->fd);
	f->map = NULL;
	f->hd = NULL;
	f->fd = -1;
}
