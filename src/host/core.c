/*
 * core — libprofhost-core.so's entry point: reads the environment, loads the
 * policy, sets up the schedule and the exit path, and answers the shim's
 * calls. Every failure is reported once and turns profiling off for the
 * process (fail open); PROF_STRICT=1 makes it fatal instead.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../control/control.h"
#include "../events/clock.h"
#include "../util/fsutil.h"
#include "../util/log.h"
#include "../util/privfd.h"
#include "../util/progname.h"
#include "capture.h"
#include "host.h"

#define PROFHOST_EXPORT __attribute__((visibility("default")))
#define STRICT_EXIT_STATUS 70
#define FINI_WAIT_MS 60000

static struct host host;
/* Reads argv from /proc/self/cmdline into buf; returns the number of
 * arguments found (up to max) with argv[i] pointing into buf. */
static int read_cmdline(char *buf, size_t size, const char **argv, int max)
{
	FILE *f = fopen("/proc/self/cmdline", "rb");
	size_t n, i;
	int argc = 0;

	if (!f)
		return 0;
	n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (i = 0; i < n && argc < max; i += strlen(buf + i) + 1)
		argv[argc++] = buf + i;
	return argc;
}

/* The program's name for the run directory (see progname.h). */
static void find_program(struct host *h)
{
	char buf[8192];
	const char *argv[4];
	int argc = read_cmdline(buf, sizeof buf, argv, 4);

	progname_from_argv(argc, argv, h->program, sizeof h->program);
}

/* Where profhost's Lua library is: PROF_LUA_DIR, else
 * <dir of this library>/../share/profhost/lua. */
static int find_lua_dir(struct host *h, char *out, size_t size, struct err *e)
{
	Dl_info info;
	char lib[PATH_MAX], *slash;

	if (h->env.lua_dir) {
		snprintf(out, size, "%s", h->env.lua_dir);
		return 0;
	}
	if (!dladdr((void *)&find_lua_dir, &info) || !info.dli_fname ||
	    !realpath(info.dli_fname, lib))
		return err_set(e, "cannot locate libprofhost-core.so to find the "
			       "Lua library (set PROF_LUA_DIR)");
	slash = strrchr(lib, '/');
	if (slash)
		*slash = '\0';
	if (snprintf(out, size, "%s/../share/profhost/lua", lib) >= (int)size)
		return err_set(e, "path of the Lua library is too long (set PROF_LUA_DIR)");
	if (access(out, R_OK) != 0)
		return err_errno(e, errno, "profhost's Lua library is missing at '%s' "
				 "(reinstall, or set PROF_LUA_DIR)", out);
	return 0;
}

/* Whether a rendezvous address names this host only (a loopback name or
 * address): the same address on two hosts is two jobs. */
static bool loopback_addr(const char *addr)
{
	return strcmp(addr, "localhost") == 0 || strncmp(addr, "127.", 4) == 0 ||
	       strcmp(addr, "::1") == 0;
}

/* When this process started (exec), as Unix time in ns: its age from
 * /proc/self/stat (clock ticks after boot, against CLOCK_BOOTTIME)
 * taken from `now`; `now` itself when that cannot be read. A rank whose
 * start-up ran late (a loaded machine, a sanitizer's runtime) still
 * started when its launcher started it. */
static int64_t process_start_ns(const struct timespec *now)
{
	int64_t real = (int64_t)now->tv_sec * 1000000000LL + now->tv_nsec;
	char buf[1024], *p;
	unsigned long long ticks = 0;
	struct timespec boot;
	long hz = sysconf(_SC_CLK_TCK);
	int64_t age;
	size_t n;
	FILE *f = fopen("/proc/self/stat", "re");
	int i;

	if (!f)
		return real;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the fields after the command name, which may hold ") " itself:
	 * state is field 3, starttime field 22 */
	p = strrchr(buf, ')');
	for (i = 2; p && i < 22; i++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &ticks) != 1 || hz <= 0 ||
	    clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
		return real;
	age = (int64_t)boot.tv_sec * 1000000000LL + boot.tv_nsec -
	      (int64_t)(ticks * (1000000000ULL / (unsigned long long)hz));
	return age > 0 ? real - age : real;
}

/* The job this process is a rank of, when its ranks rendezvous at
 * MASTER_ADDR:MASTER_PORT and there are several: its key
 * (<addr>:<port>/<world size>, the host's name added to a loopback
 * address), and when this process started, so that ranks launched
 * separately (their run ids a second apart) still share one run directory
 * (outdir.h). Start-up, after h->hostname. */
static void find_job(struct host *h)
{
	const struct host_env *env = &h->env;
	struct timespec now;
	int n;

	h->job.key = NULL;
	h->job.start_ns = 0;
	h->job_key[0] = '\0';
	if (clock_gettime(CLOCK_REALTIME, &now) != 0)
		return;
	h->start_ns = process_start_ns(&now);
	if (!env->master_addr || !env->master_port || env->world_size < 2)
		return;
	n = snprintf(h->job_key, sizeof h->job_key, "%s:%s/%d%s%s", env->master_addr,
		     env->master_port, env->world_size,
		     loopback_addr(env->master_addr) ? " on " : "",
		     loopback_addr(env->master_addr) ? h->hostname : "");
	if (n < 0 || (size_t)n >= sizeof h->job_key || strchr(h->job_key, '\n')) {
		h->job_key[0] = '\0';
		return;
	}
	h->job.key = h->job_key;
	h->job.start_ns = h->start_ns;
}

/* Decides <output dir>/<run> and the launch's run id (PROF_RUN_ID, else
 * <program>-<stamp>, exported so the processes this one starts share the
 * run; a run directory holding another run id is not written into, see
 * outdir.h). Start-up. */
static int find_run_dir(struct host *h, struct err *e)
{
	const char *dir = h->env.output_dir ? h->env.output_dir : h->cfg->output_dir;
	char cwd[PATH_MAX];
	const char *run;
	int n;

	if (!dir || !*dir)
		dir = "prof_out";
	if (h->env.run_id) {
		snprintf(h->run_id, sizeof h->run_id, "%s", h->env.run_id);
	} else {
		time_t now = time(NULL);
		struct tm tm;
		char stamp[32];

		localtime_r(&now, &tm);
		strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
		snprintf(h->run_id, sizeof h->run_id, "%s-%s", h->program, stamp);
		setenv("PROF_RUN_ID", h->run_id, 0);
	}
	run = h->cfg->run_name && *h->cfg->run_name ? h->cfg->run_name : h->run_id;
	find_job(h);
	if (dir[0] == '/') {
		n = snprintf(h->run_dir, sizeof h->run_dir, "%s/%s", dir, run);
	} else {
		/* Relative to where the process started: it may chdir later. */
		if (!getcwd(cwd, sizeof cwd))
			return err_errno(e, errno, "cannot read the current directory "
					 "for output directory '%s'", dir);
		n = snprintf(h->run_dir, sizeof h->run_dir, "%s/%s/%s", cwd, dir, run);
	}
	if (n < 0 || (size_t)n >= sizeof h->run_dir)
		return err_set(e, "output directory '%s' is too long", dir);
	return 0;
}

/* Lua's prof.capture_now lands here. */
static int policy_capture(void *ctx, uint32_t steps, const char *reason,
			  struct err *e)
{
	return window_capture_now(ctx, steps, reason, e);
}

/* Lua's prof.capture_now{ job = true } lands here: a request for every
 * rank of the run, written by the job watcher. */
static int policy_capture_job(void *ctx, uint32_t steps, const char *reason,
			      struct err *e)
{
	struct host *h = ctx;
	char from[160];
	int n = snprintf(from, sizeof from, "prof.capture_now in rank %d (pid %d on %.40s): ",
			 h->env.rank, (int)h->pid, h->hostname);

	if (n > 0 && (size_t)n < sizeof from)
		snprintf(from + n, sizeof from - (size_t)n, "%s", reason ? reason : "");
	return jobwatch_request(h, steps, from, e);
}

/* Lua's prof.dump lands here. */
static int policy_dump(void *ctx, uint32_t steps, const char *reason,
		       struct err *e)
{
	return window_dump(ctx, steps, reason, e);
}

static void core_step(void)
{
	capture_explicit_step_all();
	window_step(&host);
}

static int core_capture_now(unsigned steps, const char *reason)
{
	struct err e;

	if (window_capture_now(&host, steps, reason, &e) != 0) {
		log_msg(LOG_WARN, "prof_capture_now: %s", e.msg);
		return -1;
	}
	return 0;
}

/* prof_dump(): a refusal is said on stderr, once for each reason in a row
 * (a program may ask on every slow step). Any thread. */
static int core_dump(unsigned steps, const char *reason)
{
	static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
	static char said[ERR_MSG_MAX];
	struct err e;
	bool say;

	if (window_dump(&host, steps, reason, &e) == 0)
		return 0;
	pthread_mutex_lock(&said_lock);
	say = strcmp(said, e.msg) != 0;
	if (say)
		snprintf(said, sizeof said, "%s", e.msg);
	pthread_mutex_unlock(&said_lock);
	log_msg(say ? LOG_WARN : LOG_DEBUG, "prof_dump: %s", e.msg);
	return -1;
}

static void core_fini(void)
{
	/* First the REPL: a client hears that the process is ending, and a
	 * command holding the policy VM is stopped before the last window's
	 * report hooks need it. */
	control_stop();
	if (atomic_exchange(&host.disabled, 1))
		return;
	window_finish(&host, false);
	/* before the host thread stops: a hang's dump is handed over, a
	 * report being written ends before the sources finish */
	watchdog_stop(&host);
	jobwatch_stop(&host); /* what it has to publish is written */
	/* written: the salvage file goes (on a time-out it stays for the
	 * launcher to salvage) */
	if (hostthread_stop(&host, FINI_WAIT_MS) == 0)
		salvage_done(&host);
	capture_fini_all();
	live_fini(&host);
}

void host_arm_exit(void)
{
	if (atexit(core_fini) != 0)
		log_msg(LOG_DEBUG, "atexit failed: the exit path runs in the destructor");
}

void host_exit_now(void)
{
	log_msg(LOG_DEBUG, "the process is ending without its exit handlers: "
		"running the exit path now");
	core_fini();
}

#ifdef PROFHOST_HAVE_CUDA
static int core_cuda_inject(void)
{
	if (atomic_load(&host.disabled))
		return 1;
	capture_cuda_inject_all();
	return 1;
}
#endif

static void core_after_fork_child(void)
{
	/* The child has no host thread and must not write into the parent's
	 * windows; it stays quiet unless it execs (a new image starts over).
	 * It gets its own REPL, under its own pid. */
	atomic_store(&host.disabled, 1);
	host.forked_child = true;
	host.parent_pid = host.pid;
	host.pid = getpid();
	pthread_mutex_init(&host.win.lock, NULL);
	pthread_mutex_init(&host.ht.lock, NULL);
	atomic_store(&host.ht.wake, 0);
	atomic_store(&host.ht.ack, 0);
	host.win.sched.open = false;
	host.salv = NULL; /* the parent's salvage file, shared: never written here */
	host.salv_tried = true;
	atomic_store(&host.ht.started, 0);
	atomic_store(&host.wd.started, 0); /* no watchdog thread here */
	atomic_store(&host.wd.wake, 0);
	jobwatch_init(&host); /* no job watcher here either */
	host.jw.queue = NULL; /* the parent's: nothing is queued here */
	atomic_store(&host.jw.started, 0);
	atomic_store(&host.jw.wake, 0);
	policy_after_fork_child(host.policy);
	control_after_fork_child();
	privfd_after_fork_child();
}

/* Starts the REPL's control thread (PROF_REPL_SIGNAL=0: none). A failure
 * leaves profiling on and the REPL off. */
static void start_control(struct host *h)
{
	struct control_opts o = { 0 };
	struct err e;

	o.signal = h->env.repl_signal;
	o.idle_s = h->env.repl_idle_s;
	o.policy = h->policy;
	o.program = h->program;
	o.policy_source = policy_source(h->policy);
	e.msg[0] = '\0';
	if (control_start(&o, &e) != 0)
		log_msg(LOG_WARN, "%s; the REPL is off for this process", e.msg);
}

/* Loads the policy and fills host.cfg. Returns 0 or -1 with *e. */
static int load_policy(struct host *h, struct err *e)
{
	char lua_dir[PATH_MAX];
	struct policy_opts o = { 0 };

	if (find_lua_dir(h, lua_dir, sizeof lua_dir, e) != 0)
		return -1;
	o.lua_dir = lua_dir;
	o.script = h->env.script;
	o.sets = h->env.sets;
	o.capture_now = policy_capture;
	o.capture_ctx = h;
	o.dump = policy_dump;
	o.capture_job = policy_capture_job;
	o.live = &live_ops;
	o.live_ctx = h;
	h->policy = policy_load(&o, e);
	if (!h->policy)
		return -1;
	h->cfg = policy_config(h->policy);
	log_msg(LOG_DEBUG, "policy %s loaded", policy_source(h->policy));
	return 0;
}

PROFHOST_EXPORT int profhost_core_init(const struct shim_api *shim,
				       struct core_api *core)
{
	struct host *h = &host;
	struct err e;

	e.msg[0] = '\0';
	if (shim->version != SHIM_API_VERSION) {
		log_msg(LOG_ERROR, "libprofhost.so and libprofhost-core.so are from "
			"different versions; profiling is off (reinstall profhost)");
		return -1;
	}
	h->shim = shim;
	clock_share(shim->clock);
	if (env_read(&h->env, &e) != 0)
		goto fail;
	log_set_level(h->env.log_level);
	h->pid = getpid();
	if (gethostname(h->hostname, sizeof h->hostname - 1) != 0)
		snprintf(h->hostname, sizeof h->hostname, "host");
	find_program(h);
	if (load_policy(h, &e) != 0 || find_run_dir(h, &e) != 0)
		goto fail;
	salvage_init(h);
	jobwatch_init(h);
	hostthread_init(h);
	capture_init_all(h);
	window_init(h);
	if (watchdog_start(h, &e) != 0)
		host_fail(h, &e);
	if (jobwatch_start(h, &e) != 0)
		host_fail(h, &e);
	exitpath_install(h);
	start_control(h);
	core->step = core_step;
	core->capture_now = core_capture_now;
	core->dump = core_dump;
	core->fini = core_fini;
	core->after_fork_child = core_after_fork_child;
#ifdef PROFHOST_HAVE_CUDA
	core->cuda_inject = core_cuda_inject;
#endif
	log_msg(LOG_DEBUG, "ready: pid %d, rank %d, output %s", (int)h->pid,
		h->env.rank, h->run_dir);
	return 0;
fail:
	log_msg(LOG_ERROR, "%s; profiling is off for this process", e.msg);
	if (h->env.strict) {
		log_msg(LOG_ERROR, "PROF_STRICT=1: exiting with status %d",
			STRICT_EXIT_STATUS);
		_exit(STRICT_EXIT_STATUS);
	}
	policy_free(h->policy);
	h->policy = NULL;
	env_free(&h->env);
	return -1;
}
