/*
 * test_salvage_read — the salvage file reader on hand-made files: whole
 * records come back as a trace with its steps and the partial step the
 * process died in; a record past a chunk's `used` (torn) and a damaged
 * record inside it are dropped and counted; a generation given back is
 * not read; a foreign, short, truncated or live file is refused with one
 * line naming it. NVTX domain and category names come from the file's
 * names (the last record of a key wins; a damaged record ends them); CPU
 * samples are named from the module table against the files on disk (this
 * test's own executable), a module whose file is gone stays an address
 * and is named once in the notes, and damaged entries are skipped.
 */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "salvage/salvage_read.h"
#include "common/evformat.h"
#include "testdir.h"

#define POOL_OFF SALV_ALIGN
#define GEN 5

static char dir[4096];

/* A function of this executable for a sample to land in. */
__attribute__((noinline, noipa)) int salvage_sample_target(int x)
{
	return x * 3 + 1;
}

/* dl_iterate_phdr callback: the main program's bias and extent. */
static int main_extent(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct salv_module *m = arg;
	int i;

	(void)size;
	m->bias = info->dlpi_addr;
	m->lo = UINT64_MAX;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < m->lo)
			m->lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > m->hi)
			m->hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	return 1; /* the first is the main program */
}

/* Appends module `path` (entry m's extent) to h's table. */
static void put_module(struct salv_header *h, const struct salv_module *m,
		       const char *path)
{
	uint32_t n = atomic_load(&h->nmods);

	h->mods[n] = *m;
	h->mods[n].path_off = h->paths_used;
	h->mods[n].path_len = (uint16_t)strlen(path);
	memcpy(h->mod_paths + h->paths_used, path, strlen(path));
	h->paths_used += (uint32_t)strlen(path);
	atomic_store(&h->nmods, n + 1);
}

/* Appends NVTX name record (kind, domain, category, text) to h, its
 * length field `len`. */
static void put_name(struct salv_header *h, uint8_t kind, uint32_t domain,
		     uint32_t category, const char *text, uint16_t len)
{
	uint32_t used = atomic_load(&h->names_used);
	struct salv_name r = { domain, category, len, kind, 0 };

	memcpy(h->names + used, &r, sizeof r);
	memcpy(h->names + used + sizeof r, text, strlen(text));
	atomic_store(&h->names_used,
		     used + (uint32_t)((sizeof r + strlen(text) + 3) & ~(size_t)3));
}

/* Fills h's module table and names: a damaged entry, this executable
 * (the same file: its stat), a library whose file is gone; NVTX domain 1
 * "dom_a", its category 2 named "cat_x" then "cat_y", then a damaged
 * record naming domain 2. */
static void put_tables(struct salv_header *h)
{
	struct salv_module m = { 0 };
	char exe[4096];
	struct stat st;
	ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);

	if (k <= 0 || stat((exe[k] = '\0', exe), &st) != 0) {
		perror("/proc/self/exe");
		exit(2);
	}
	m.lo = 0x1000;
	m.hi = 0x2000;
	m.ino = 1;
	put_module(h, &m, "x");
	h->mods[0].path_off = SALV_MOD_PATHS - 1; /* damaged: past the area */
	h->mods[0].path_len = 100;
	memset(&m, 0, sizeof m);
	dl_iterate_phdr(main_extent, &m);
	m.dev = (uint64_t)st.st_dev;
	m.ino = (uint64_t)st.st_ino;
	m.size = (uint64_t)st.st_size;
	m.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	put_module(h, &m, exe);
	memset(&m, 0, sizeof m);
	m.lo = 0x7000;
	m.hi = 0x9000;
	m.bias = 0x7000;
	m.ino = 42;
	put_module(h, &m, "/nonexistent/libgone.so");
	put_name(h, SALV_NAME_DOMAIN, 1, 0, "dom_a", 5);
	put_name(h, SALV_NAME_CATEGORY, 1, 2, "cat_x", 5);
	put_name(h, SALV_NAME_CATEGORY, 1, 2, "cat_y", 5);
	put_name(h, SALV_NAME_DOMAIN, 2, 0, "dom_b", 60000); /* damaged */
}

/* Appends a full record to chunk c at *off. */
static void put_rec(char *data, uint32_t *off, uint16_t kind, int64_t ts,
		    const char *name, uint64_t id, uint64_t a)
{
	struct evbuf_rec *r = (struct evbuf_rec *)(data + *off);
	uint32_t len = name ? (uint32_t)strlen(name) : 0;

	r->kind = kind;
	r->size = (uint16_t)((sizeof *r + len + 7) & ~7u);
	r->len = len;
	r->ts = ts;
	r->id = id;
	r->a = a;
	if (len)
		memcpy(r + 1, name, len);
	*off += r->size;
}

/* Writes a salvage file of a window (generation GEN in slot GEN % 4, two
 * chunks) into `path`: chunk 0 holds push "work" at 1100, mark "tick" at
 * 1200, pop at 1300, then a torn push past `used`; chunk 1 (another
 * thread) a mark at 1500 and a record whose size is wrong inside `used`.
 * Steps 7 (1000-1400) and 8 (1400-1450) are complete. */
static void make_file(const char *path, uint64_t slot_gen)
{
	size_t size = POOL_OFF + 2 * EVBUF_CHUNK_BYTES;
	char *m = calloc(1, size);
	struct salv_header *h = (struct salv_header *)m;
	struct salv_slot *s = &h->slots[GEN % SALV_SLOTS];
	struct evbuf_chunk *c0 = (struct evbuf_chunk *)(m + POOL_OFF);
	struct evbuf_chunk *c1 = (struct evbuf_chunk *)(m + POOL_OFF + EVBUF_CHUNK_BYTES);
	struct evbuf_rec *bad;
	uint32_t off = 0;
	int fd;

	memcpy(h->magic, SALV_MAGIC, 8);
	h->version = SALV_VERSION;
	h->header_bytes = (uint32_t)SALV_HEADER_BYTES;
	h->pid = 4242;
	h->chunk_bytes = EVBUF_CHUNK_BYTES;
	atomic_store(&h->ident_ok, 1);
	h->rank = 1;
	h->world_size = 2;
	snprintf(h->program, sizeof h->program, "trainer");
	snprintf(h->hostname, sizeof h->hostname, "node7");
	snprintf(h->run_dir, sizeof h->run_dir, "/out/trainer-run");
	atomic_store(&s->gen, slot_gen);
	s->off = POOL_OFF;
	s->bytes = 2 * EVBUF_CHUNK_BYTES;
	atomic_store(&h->state_cur, 1);
	h->state[0].kind = SALV_NONE; /* the stale copy */
	h->state[1].kind = SALV_WINDOW;
	h->state[1].index = 3;
	h->state[1].first_step = 7;
	h->state[1].start_ts = 1000;
	h->state[1].base_time_ns = 1700000000000000000LL;
	h->state[1].ngens = 1;
	h->state[1].gens[0] = GEN;
	snprintf(h->state[1].reason, sizeof h->state[1].reason, "schedule");
	h->steps[0] = (struct salv_step){ 6, 500, 400, 11, 0 }; /* before it */
	h->steps[1] = (struct salv_step){ 7, 1000, 400, 11, 0 };
	h->steps[2] = (struct salv_step){ 8, 1400, 50, 11, 0 };
	atomic_store(&h->nsteps, 3);
	h->state[1].hz = 100;
	h->state[1].depth = 64;
	put_tables(h);

	c0->tid = 11;
	memcpy(c0->thread_name, "main", 4);
	put_rec((char *)(c0 + 1), &off, EVBUF_RANGE_PUSH, 1100, "work", 0, 0);
	put_rec((char *)(c0 + 1), &off, EVBUF_MARK, 1200, "tick", 0,
		evbuf_nvtx_a(1, 2, 0));
	put_rec((char *)(c0 + 1), &off, EVBUF_MARK, 1210, "other", 0,
		evbuf_nvtx_a(2, 0, 0));
	{
		/* samples: in salvage_sample_target, then in the gone library */
		uint64_t ips[2] = { (uint64_t)(uintptr_t)&salvage_sample_target + 1,
				    (uint64_t)(uintptr_t)&salvage_sample_target + 2 };
		struct evbuf_rec *r = (struct evbuf_rec *)((char *)(c0 + 1) + off);

		put_rec((char *)(c0 + 1), &off, EVBUF_SAMPLE, 1220, "1234567890123456", 1, 0);
		memcpy(r + 1, ips, sizeof ips);
		ips[0] = 0x7800;
		r = (struct evbuf_rec *)((char *)(c0 + 1) + off);
		put_rec((char *)(c0 + 1), &off, EVBUF_SAMPLE, 1230, "1234567890123456", 1, 0);
		memcpy(r + 1, ips, sizeof ips);
	}
	put_rec((char *)(c0 + 1), &off, EVBUF_RANGE_POP, 1300, NULL, 0, 0);
	atomic_store(&c0->used, off);
	{
		uint32_t torn = off;

		put_rec((char *)(c0 + 1), &torn, EVBUF_RANGE_PUSH, 1350, "late", 0, 0);
	}
	off = 0;
	c1->tid = 12;
	memcpy(c1->thread_name, "loader", 6);
	put_rec((char *)(c1 + 1), &off, EVBUF_MARK, 1500, "fetch", 0, 0);
	bad = (struct evbuf_rec *)((char *)(c1 + 1) + off);
	put_rec((char *)(c1 + 1), &off, EVBUF_MARK, 1600, "spoiled", 0, 0);
	bad->size = 8; /* damaged */
	atomic_store(&c1->used, off);

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, m, size) != (ssize_t)size) {
		perror(path);
		exit(2);
	}
	close(fd);
	free(m);
}

static size_t count_named(const struct trace *t, const char *name)
{
	size_t i, n = 0;

	for (i = 0; i < t->nev; i++)
		if (strcmp(trace_str(t, t->ev[i].name), name) == 0)
			n++;
	return n;
}

/* True when the first event named `name` has string arg key = want. */
static bool has_arg(const struct trace *t, const char *name, const char *key,
		    const char *want)
{
	size_t i, k;

	for (i = 0; i < t->nev; i++) {
		const struct trace_event *e = &t->ev[i];

		if (strcmp(trace_str(t, e->name), name) != 0)
			continue;
		for (k = 0; k < e->nargs; k++) {
			const struct trace_arg *a = &t->args[e->args + k];

			if (strcmp(trace_str(t, a->key), key) == 0)
				return a->type == TRACE_ARG_STR &&
				       strcmp(trace_str(t, a->v.str), want) == 0;
		}
		return false;
	}
	return false;
}

static void test_torn_records(void)
{
	char path[4200];
	struct salvage_file f;
	struct trace t;
	struct err e;

	snprintf(path, sizeof path, "%s/a.salvage", dir);
	make_file(path, GEN);
	CHECK_EQ_INT(salvage_open(path, &f, &e), 0);
	CHECK(salvage_recording(&f));
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(salvage_build(&f, "after SIGKILL", &t, &e), 0);
	/* one torn record past `used`, one damaged inside it */
	CHECK_EQ_INT((int)f.torn, 2);
	CHECK_EQ_STR(t.meta.reason, "schedule, salvaged after SIGKILL");
	CHECK(contains(t.meta.notes, "2 torn records dropped"));
	CHECK_EQ_INT(t.meta.rank, 1);
	CHECK_EQ_INT((int)t.meta.window, 3);
	CHECK_EQ_INT(t.meta.pid, 4242);
	CHECK_EQ_STR(t.meta.run, "trainer-run");
	CHECK_EQ_STR(t.meta.program, "trainer");
	/* steps 7 and 8, then 9 partial up to the last record (1500) */
	CHECK_EQ_INT((int)t.meta.first_step, 7);
	CHECK_EQ_INT((int)t.meta.last_step, 9);
	CHECK_EQ_INT((int)t.nsteps, 3);
	if (t.nsteps == 3) {
		CHECK_EQ_INT((int)t.steps[0].step, 7);
		CHECK_EQ_INT((int)t.steps[2].step, 9);
		CHECK(t.steps[2].partial);
		CHECK_EQ_INT((int)t.steps[2].ts, 1450);
		CHECK_EQ_INT((int)t.steps[2].dur, 50);
	}
	CHECK_EQ_INT((int)count_named(&t, "work"), 1);
	CHECK_EQ_INT((int)count_named(&t, "tick"), 1);
	CHECK_EQ_INT((int)count_named(&t, "fetch"), 1);
	CHECK_EQ_INT((int)count_named(&t, "late"), 0);
	CHECK_EQ_INT((int)count_named(&t, "spoiled"), 0);
	/* NVTX names: the last name of a key; a damaged record named none */
	CHECK(has_arg(&t, "tick", "domain", "dom_a"));
	CHECK(has_arg(&t, "tick", "category", "cat_y"));
	CHECK(!has_arg(&t, "other", "domain", "dom_b"));
	/* CPU samples: named from this executable; the gone library's frame
	 * an address, said once */
	CHECK_EQ_INT((int)t.sampling.hz, 100);
	CHECK_EQ_INT((int)count_named(&t, "salvage_sample_target"), 1);
	CHECK_EQ_INT((int)count_named(&t, "libgone.so+0x800"), 1);
	CHECK(contains(t.meta.notes, "1 module changed or removed"));
	CHECK(contains(t.meta.notes, "/nonexistent/libgone.so"));
	trace_free(&t);
	salvage_close(&f);
}

/* A generation given back (its slot now holds another) is not read. */
static void test_released_generation(void)
{
	char path[4200];
	struct salvage_file f;
	struct trace t;
	struct err e;

	snprintf(path, sizeof path, "%s/b.salvage", dir);
	make_file(path, GEN + SALV_SLOTS);
	CHECK_EQ_INT(salvage_open(path, &f, &e), 0);
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(salvage_build(&f, "after SIGKILL", &t, &e), 0);
	CHECK_EQ_INT((int)count_named(&t, "work"), 0);
	CHECK_EQ_INT((int)f.torn, 0);
	/* not "kept out of the file": its records went with the slot */
	CHECK_EQ_INT((int)f.pools_out, 0);
	CHECK(!contains(t.meta.notes, "not in the salvage file"));
	trace_free(&t);
	salvage_close(&f);
	/* nor a slot free again (given back before the state said so) */
	make_file(path, 0);
	CHECK_EQ_INT(salvage_open(path, &f, &e), 0);
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(salvage_build(&f, "after SIGKILL", &t, &e), 0);
	CHECK_EQ_INT((int)f.pools_out, 0);
	trace_free(&t);
	salvage_close(&f);
}

/* A window whose pool stayed out of the file (its slot names it at
 * offset 0 with no bytes: the tmpfs had no room) is salvaged as its
 * steps, and the notes say its records were lost. */
static void test_pool_out_of_file(void)
{
	char path[4200];
	struct salvage_file f;
	struct salv_slot slot = { 0 };
	struct trace t;
	struct err e;
	int fd;

	snprintf(path, sizeof path, "%s/d.salvage", dir);
	make_file(path, GEN);
	atomic_store(&slot.gen, GEN);
	fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ_INT((int)pwrite(fd, &slot, sizeof slot,
				 (off_t)offsetof(struct salv_header, slots) +
				 (off_t)((GEN % SALV_SLOTS) * sizeof slot)), (int)sizeof slot);
	close(fd);
	CHECK_EQ_INT(salvage_open(path, &f, &e), 0);
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(salvage_build(&f, "after SIGKILL", &t, &e), 0);
	CHECK_EQ_INT((int)f.pools_out, 1);
	CHECK_EQ_INT((int)count_named(&t, "work"), 0);
	CHECK_EQ_INT((int)t.nsteps, 2);
	CHECK(contains(t.meta.notes, "the window's event pool was not in the salvage file"));
	trace_free(&t);
	salvage_close(&f);
}

/* Damaged step entries (a time that overflows with its duration, a
 * negative time or duration) and a damaged start time are skipped or
 * taken as 0, never computed with (signed overflow). */
static void test_damaged_steps(void)
{
	char path[4200];
	struct salvage_file f;
	struct salv_header *h = malloc(sizeof *h);
	struct trace t;
	struct err e;
	int fd;

	snprintf(path, sizeof path, "%s/e.salvage", dir);
	make_file(path, GEN);
	fd = open(path, O_RDWR);
	CHECK(fd >= 0 && h);
	CHECK_EQ_INT((int)pread(fd, h, sizeof *h, 0), (int)sizeof *h);
	h->steps[3] = (struct salv_step){ 9, INT64_MAX - 10, 1000, 11, 0 };
	h->steps[4] = (struct salv_step){ 9, -5, 10, 11, 0 };
	h->steps[5] = (struct salv_step){ 9, 1450, -1, 11, 0 };
	atomic_store(&h->nsteps, 6);
	h->state[1].start_ts = INT64_MIN; /* damaged: taken as 0 */
	CHECK_EQ_INT((int)pwrite(fd, h, sizeof *h, 0), (int)sizeof *h);
	close(fd);
	free(h);
	CHECK_EQ_INT(salvage_open(path, &f, &e), 0);
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(salvage_build(&f, "after SIGKILL", &t, &e), 0);
	/* 7 and 8, then 9 partial up to the last record, as undamaged */
	CHECK_EQ_INT((int)t.nsteps, 3);
	if (t.nsteps == 3) {
		CHECK_EQ_INT((int)t.steps[2].ts, 1450);
		CHECK_EQ_INT((int)t.steps[2].dur, 50);
	}
	trace_free(&t);
	salvage_close(&f);
}

/* Expects salvage_open to refuse `path` with one line holding `want`. */
static void expect_refused(const char *path, const char *want)
{
	struct salvage_file f;
	struct err e;

	CHECK_EQ_INT(salvage_open(path, &f, &e), -1);
	CHECK(contains(e.msg, want));
	CHECK(contains(e.msg, path));
	CHECK(!strchr(e.msg, '\n'));
}

/* Sets the writer's pid in the salvage file at `path`. */
static void set_pid(const char *path, pid_t pid)
{
	int32_t v = (int32_t)pid;
	int fd = open(path, O_WRONLY);

	CHECK(fd >= 0 && pwrite(fd, &v, sizeof v, (off_t)offsetof(struct salv_header, pid)) ==
			 (ssize_t)sizeof v);
	close(fd);
}

/* The pid of a process that has ended (a child, waited for). */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	return pid;
}

static void test_bad_files(void)
{
	char path[4200], other[4300];
	int fd;

	snprintf(path, sizeof path, "%s/c.salvage", dir);
	make_file(path, GEN);
	/* cut inside the pool */
	CHECK_EQ_INT(truncate(path, (off_t)(POOL_OFF + 100)), 0);
	expect_refused(path, "is truncated or damaged");
	/* cut inside the header */
	CHECK_EQ_INT(truncate(path, 4096), 0);
	expect_refused(path, "is truncated");
	snprintf(other, sizeof other, "%s/foreign.salvage", dir);
	testdir_write(other, "#!/bin/sh\necho this is not a salvage file\n");
	expect_refused(other, "is not a profhost salvage file");
	snprintf(other, sizeof other, "%s/none.salvage", dir);
	expect_refused(other, "cannot open salvage file");
	/* a FIFO: refused at once (its open blocked forever; the alarm's
	 * default action ends the test if it still does) */
	snprintf(other, sizeof other, "%s/fifo.salvage", dir);
	CHECK_EQ_INT(mkfifo(other, 0600), 0);
	alarm(20);
	expect_refused(other, "is not a regular file");
	alarm(0);
	/* live: its writer (this process here) holds the lock */
	make_file(path, GEN);
	set_pid(path, getpid());
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
	expect_refused(path, "belongs to process");
	expect_refused(path, "which is still running");
	close(fd);
	/* its writer has ended, another reader holds the lock */
	set_pid(path, dead_pid());
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
	expect_refused(path, "is being salvaged by another prof");
	close(fd);
}

int main(void)
{
	testdir_make(dir, sizeof dir, "salvage_read", false);
	test_torn_records();
	test_released_generation();
	test_pool_out_of_file();
	test_damaged_steps();
	test_bad_files();
	testdir_remove(dir);
	return check_done();
}
