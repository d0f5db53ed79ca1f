/*
 * salvage — the core's half of the salvage file (src/common/salvfile.h):
 * who this process is, what it records and its last steps, written into
 * the header the shim shares with the file, so that `prof run` or
 * `prof salvage` can write the recording of a process that died of
 * SIGKILL or ended in _exit() (docs/recorder.md).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/salvfile.h"
#include "../common/log.h"
#include "../salvage/salvscan.h"
#include "host.h"

#define SALVAGE_DEFAULT_DIR SALVSCAN_SHM

/* The header the GPU names go to (h->salv, published for CUPTI's
 * thread), and the lock their writers share. */
static _Atomic(struct salv_header *) gpu_hdr;
static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
/* The CPU sampler's signal (salvage_sample_signal), for a file made later. */
static _Atomic int sample_signo;
/* The interpreter's eval code (salvage_py_eval), for a file made later. */
static _Atomic uint64_t py_eval_lo, py_eval_hi;

/* Copies `src` into dst[size], cut and NUL-ended. */
static void copy_text(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

/* The salvage file's folder: h->salvage_dir, else /dev/shm. */
static const char *salvage_folder(const struct host *h)
{
	return h->salvage_dir[0] ? h->salvage_dir : SALVAGE_DEFAULT_DIR;
}

/* Says, once at start-up, how many salvage files of this user's processes
 * that ended lie in this process's salvage folder (and its launcher
 * folders whose launcher is gone), how much memory they hold, and what to
 * run. Cheap and never blocks: salvscan reads the folders and tries
 * non-blocking locks, nothing more. A `prof run`'s own folder is left to
 * that launcher. */
static void say_orphans(const struct host *h)
{
	const char *dir = salvage_folder(h);
	struct salvscan_count c = { 0 };
	char cmd[PATH_MAX + 64];

	salvscan_dir(dir, false, NULL, NULL, &c);
	if (!c.orphans)
		return;
	if (strcmp(dir, SALVAGE_DEFAULT_DIR) == 0)
		snprintf(cmd, sizeof cmd, "prof salvage --all");
	else
		snprintf(cmd, sizeof cmd, "prof salvage --all '%s'", dir);
	log_msg(LOG_WARN, "%u salvage file%s of processes that ended hold%s %llu MiB of "
		"memory in '%s' until salvaged: `%s` writes what %s recorded into %s run "
		"folder%s and frees it (add --discard to only free it)", c.orphans,
		c.orphans == 1 ? "" : "s", c.orphans == 1 ? "s" : "",
		(unsigned long long)((c.bytes + (1u << 20) - 1) >> 20), dir, cmd,
		c.orphans == 1 ? "its process" : "they", c.orphans == 1 ? "its" : "their",
		c.orphans == 1 ? "" : "s");
}

void salvage_init(struct host *h)
{
	const char *dir = h->env.salvage_dir;
	char cwd[PATH_MAX], why[256];
	int n;

	h->salvage_dir[0] = '\0';
	if (dir) {
		if (dir[0] == '/' || !getcwd(cwd, sizeof cwd))
			n = snprintf(h->salvage_dir, sizeof h->salvage_dir, "%s", dir);
		else
			n = snprintf(h->salvage_dir, sizeof h->salvage_dir, "%s/%s", cwd, dir);
		/* too long: salvage_open says so, naming the folder */
		if (n < 0 || (size_t)n >= sizeof h->salvage_dir)
			snprintf(h->salvage_dir, sizeof h->salvage_dir, "%s", dir);
		/* another user's, or one others can write: they could remove,
		 * replace or plant files where the salvage file goes (missing:
		 * salvage_ensure says so when the file is to be made) */
		if (salvscan_check_dir(h->salvage_dir, why, sizeof why) == SALVSCAN_DIR_REFUSED) {
			log_msg(LOG_WARN, "PROF_SALVAGE_DIR '%s' is refused: %s; the salvage "
				"file goes to " SALVAGE_DEFAULT_DIR " instead (name a folder of "
				"yours that no one else can write, e.g. mkdir -m 700 on a tmpfs, "
				"or unset PROF_SALVAGE_DIR)", dir, why);
			h->salvage_dir[0] = '\0';
		}
	}
	say_orphans(h);
}

void salvage_ensure(struct host *h)
{
	const char *dir = salvage_folder(h);
	const struct policy_config *c = h->cfg;
	struct salv_header *hd;
	char why[512];
	uint32_t flags = 0;

	if (h->salv_tried || !h->shim->salvage_open)
		return;
	h->salv_tried = true;
	hd = h->shim->salvage_open(dir, why, sizeof why);
	if (!hd) {
		log_msg(LOG_WARN, "no salvage file (%s): a window or recorder this "
			"process holds is lost if it dies of SIGKILL or ends in _exit() "
			"(set PROF_SALVAGE_DIR to a tmpfs folder you own)", why);
		return;
	}
	hd->rank = h->env.rank;
	hd->world_size = h->env.world_size;
	flags |= c->export.chrome ? SALV_F_CHROME : 0;
	flags |= c->export.chrome_gzip ? SALV_F_GZIP : 0;
	flags |= c->export.key_averages ? SALV_F_KEY_AVERAGES : 0;
	flags |= c->export.summary ? SALV_F_SUMMARY : 0;
	flags |= c->export.raw ? SALV_F_RAW : 0;
	flags |= c->export.stacks ? SALV_F_STACKS : 0;
	flags |= c->export.report_text ? SALV_F_REPORT_TEXT : 0;
	flags |= c->export.report_html ? SALV_F_REPORT_HTML : 0;
	flags |= c->export.memory_timeline ? SALV_F_MEMORY_TIMELINE : 0;
	flags |= c->recorder.enabled && c->recorder.job ? SALV_F_JOB : 0;
	hd->flags = flags;
	copy_text(hd->program, sizeof hd->program, h->program);
	copy_text(hd->hostname, sizeof hd->hostname, h->hostname);
	copy_text(hd->run_dir, sizeof hd->run_dir, h->run_dir);
	copy_text(hd->run_id, sizeof hd->run_id, h->run_id);
	atomic_store_explicit(&hd->ident_ok, 1, memory_order_release);
	h->salv = hd;
	atomic_store_explicit(&gpu_hdr, hd, memory_order_release);
	atomic_store_explicit(&hd->sample_signal, atomic_load(&sample_signo),
			      memory_order_relaxed);
	atomic_store_explicit(&hd->py_eval_lo, atomic_load(&py_eval_lo), memory_order_relaxed);
	atomic_store_explicit(&hd->py_eval_hi, atomic_load(&py_eval_hi), memory_order_relaxed);
	log_msg(LOG_DEBUG, "salvage file %s", h->shim->salvage_path());
}

void salvage_check_pool(struct host *h, uint64_t gen, size_t bytes, const char *setting)
{
	/* A slot still held by an older generation names that one (the new
	 * one's records drop, counted as noslot): not this. */
	if (!h->salv || h->salv_pool_said || !salv_gen_kept_out(h->salv->slots, gen))
		return;
	h->salv_pool_said = true;
	log_msg(LOG_WARN, "an event pool of %zu MiB is not in the salvage file: its "
		"folder '%s' (a tmpfs) had not that much room free beside what "
		"profhost leaves the program (a quarter of it, at least 64 MiB), so "
		"a SIGKILL or _exit() loses what it records (give that tmpfs more "
		"room, or lower %s)", bytes >> 20, salvage_folder(h), setting);
}

/* True when states a and b name the same recording. */
static bool same_state(const struct salv_state *a, const struct salv_state *b)
{
	return a->kind == b->kind && a->index == b->index &&
	       a->first_step == b->first_step && a->start_ts == b->start_ts &&
	       a->ngens == b->ngens &&
	       memcmp(a->gens, b->gens, a->ngens * sizeof a->gens[0]) == 0;
}

void salvage_publish(struct host *h)
{
	struct salv_header *hd = h->salv;
	const struct window_state *w = &h->win;
	struct salv_state st;
	uint32_t cur, i;

	if (!hd)
		return;
	memset(&st, 0, sizeof st);
	if (w->sched.open) {
		st.kind = SALV_WINDOW;
		st.index = w->sched.index;
		st.first_step = w->sched.window_first;
		st.start_ts = w->start_ts;
		st.ngens = w->gen ? 1 : 0;
		st.gens[0] = w->gen;
		copy_text(st.reason, sizeof st.reason, w->sched.reason);
	} else if (w->rec.nseg) {
		st.kind = SALV_RECORDER;
		st.index = w->rec.dumps;
		st.first_step = w->rec.seg[0].first;
		st.start_ts = w->rec.seg[0].start_ts;
		st.ngens = w->rec.nseg < SALV_GENS ? w->rec.nseg : SALV_GENS;
		for (i = 0; i < st.ngens; i++)
			st.gens[i] = w->rec.seg[i].gen;
		copy_text(st.reason, sizeof st.reason, "recorder");
	}
	/* what the sampler samples it with (sampler.c's settings_of) */
	if (st.kind && h->cfg->capture.cpu_hz &&
	    (st.kind == SALV_WINDOW || h->cfg->recorder.cpu_samples)) {
		st.hz = h->cfg->capture.cpu_hz;
		st.depth = h->cfg->capture.cpu_depth ? h->cfg->capture.cpu_depth : 128;
		st.wall_clock = h->cfg->capture.cpu_wall_clock;
	}
	cur = atomic_load_explicit(&hd->state_cur, memory_order_relaxed) & 1;
	if (same_state(&hd->state[cur], &st))
		return;
	/* measured once per recording, as a window's is when it is written */
	st.base_time_ns = st.kind ? clock_wall_offset_ns() : 0;
	hd->state[cur ^ 1] = st;
	atomic_store_explicit(&hd->state_cur, cur ^ 1, memory_order_release);
}

void salvage_step(struct host *h, uint64_t step, int64_t ts, int64_t dur, int32_t tid)
{
	struct salv_header *hd = h->salv;
	uint64_t n;
	struct salv_step *s;

	if (!hd)
		return;
	n = atomic_load_explicit(&hd->nsteps, memory_order_relaxed);
	s = &hd->steps[n % SALV_STEPS];
	s->step = step;
	s->ts = ts;
	s->dur = dur;
	s->tid = tid;
	atomic_store_explicit(&hd->nsteps, n + 1, memory_order_release);
}

void salvage_gpu_name(unsigned kind, uint64_t key, const void *rec, size_t rlen,
		     const char *text)
{
	struct salv_header *hd = atomic_load_explicit(&gpu_hdr, memory_order_acquire);
	struct salv_gpu_name r;
	size_t len = text ? strnlen(text, SALV_GPU_NAME_MAX) : 0;
	uint32_t used, need;

	if (!hd)
		return;
	if (rlen > UINT16_MAX)
		rlen = 0;
	need = (uint32_t)((sizeof r + rlen + len + 7) & ~(size_t)7);
	pthread_mutex_lock(&gpu_lock);
	used = atomic_load_explicit(&hd->gpu_used, memory_order_relaxed);
	if (used > SALV_GPU_BYTES || need > SALV_GPU_BYTES - used) {
		hd->gpu_lost++;
		pthread_mutex_unlock(&gpu_lock);
		return;
	}
	memset(&r, 0, sizeof r);
	r.key = key;
	r.len = (uint32_t)len;
	r.dlen = (uint16_t)rlen;
	r.kind = (uint8_t)kind;
	memcpy(hd->gpu + used, &r, sizeof r);
	if (rlen)
		memcpy(hd->gpu + used + sizeof r, rec, rlen);
	if (len)
		memcpy(hd->gpu + used + sizeof r + rlen, text, len);
	atomic_store_explicit(&hd->gpu_used, used + need, memory_order_release);
	pthread_mutex_unlock(&gpu_lock);
}

void salvage_sample_signal(int signo)
{
	struct salv_header *hd = atomic_load_explicit(&gpu_hdr, memory_order_acquire);

	atomic_store(&sample_signo, signo);
	if (hd)
		atomic_store_explicit(&hd->sample_signal, signo, memory_order_relaxed);
}

void salvage_py_eval(uint64_t lo, uint64_t hi)
{
	struct salv_header *hd = atomic_load_explicit(&gpu_hdr, memory_order_acquire);

	atomic_store(&py_eval_lo, lo);
	atomic_store(&py_eval_hi, hi);
	if (hd) {
		atomic_store_explicit(&hd->py_eval_lo, lo, memory_order_relaxed);
		atomic_store_explicit(&hd->py_eval_hi, hi, memory_order_relaxed);
	}
}

void salvage_done(struct host *h)
{
	if (h->salv && h->shim->salvage_remove)
		h->shim->salvage_remove();
}
