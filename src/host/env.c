/* env — the host's environment variables (see env.h). */
#include "env.h"

#include <errno.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>

#include "../control/control.h"

#define ENV_REPL_IDLE_DEFAULT 600

/* Returns the variable's value, or NULL when unset or empty. */
static const char *env_get(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* Parses a non-negative decimal integer. Returns 0 or -1. */
static int env_parse_uint(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 1000000000)
		return -1;
	*out = (int)v;
	return 0;
}

/* The first of `names` that is set to an integer >= `min` gives *out; a
 * malformed or smaller one is warned about (one line) and skipped. */
static void env_first_int(const char *const *names, int min, int *out)
{
	for (; *names; names++) {
		const char *v = env_get(*names);
		int n;

		if (!v)
			continue;
		if (env_parse_uint(v, &n) == 0 && n >= min) {
			*out = n;
			return;
		}
		log_msg(LOG_WARN, "%s='%s' is not an integer of at least %d; ignored",
			*names, v, min);
	}
}

int env_read(struct host_env *env, struct err *e)
{
	static const char *const rank_vars[] = { "RANK", "SLURM_PROCID",
		"OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL };
	static const char *const size_vars[] = { "WORLD_SIZE", "SLURM_NTASKS",
		"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL };
	const char *v;
	size_t n = 0;
	char *p, *save = NULL;

	memset(env, 0, sizeof *env);
	env->log_level = LOG_INFO;
	env->world_size = 1;

	v = env_get("PROF_LOG");
	if (v && log_parse_level(v, &env->log_level) != 0)
		return err_set(e, "PROF_LOG='%s' is not a log level (use quiet, "
			       "info or debug)", v);
	v = env_get("PROF_STRICT");
	if (v) {
		if (strcmp(v, "1") == 0)
			env->strict = true;
		else if (strcmp(v, "0") != 0)
			return err_set(e, "PROF_STRICT='%s' is not understood (use 1 "
				       "to make profhost failures fatal, 0 or unset "
				       "to report them and go on)", v);
	}
	/* Read by the shim's clock (src/common/clock.c) before the core
	 * loads; checked here, where a bad value can be said. */
	v = env_get("PROF_CLOCK");
	if (v && strcmp(v, "monotonic") != 0 && strcmp(v, "auto") != 0)
		return err_set(e, "PROF_CLOCK='%s' is not understood (use monotonic to "
			       "read CLOCK_MONOTONIC, or auto or unset for the TSC "
			       "where the kernel keeps time with it)", v);
	env->script = env_get("PROF_SCRIPT");
	env->output_dir = env_get("PROF_OUTPUT_DIR");
	env->run_id = env_get("PROF_RUN_ID");
	if (env->run_id && (strchr(env->run_id, '/') || strcmp(env->run_id, ".") == 0 ||
			    strcmp(env->run_id, "..") == 0))
		return err_set(e, "PROF_RUN_ID='%s' must be a plain directory name "
			       "(no '/')", env->run_id);
	env->master_addr = env_get("MASTER_ADDR");
	env->master_port = env_get("MASTER_PORT");
	env->notes = env_get("PROF_LAUNCHER_NOTES");
	env->salvage_dir = env_get("PROF_SALVAGE_DIR");
	env->lua_dir = env_get("PROF_LUA_DIR");
	env->python = true;
	v = env_get("PROF_PYTHON");
	if (v) {
		if (strcmp(v, "0") == 0)
			env->python = false;
		else if (strcmp(v, "1") != 0)
			return err_set(e, "PROF_PYTHON='%s' is not understood (use 0 "
				       "to turn the Python bridge off, 1 or unset to "
				       "keep it)", v);
	}

	env->repl_signal = SIGUSR1;
	v = env_get("PROF_REPL_SIGNAL");
	if (v && control_parse_signal(v, &env->repl_signal, e) != 0)
		return -1;
	env->repl_idle_s = ENV_REPL_IDLE_DEFAULT;
	v = env_get("PROF_REPL_IDLE");
	if (v) {
		int idle;

		if (env_parse_uint(v, &idle) != 0)
			return err_set(e, "PROF_REPL_IDLE='%s' is not a number of "
				       "seconds (0: never drop an idle REPL client)", v);
		env->repl_idle_s = (unsigned)idle;
	}

	v = env_get("PROF_SET");
	if (v) {
		env->set_buf = strdup(v);
		if (!env->set_buf)
			return err_set(e, "out of memory reading PROF_SET");
		for (p = strtok_r(env->set_buf, "\n", &save); p;
		     p = strtok_r(NULL, "\n", &save)) {
			if (!*p)
				continue;
			if (n == ENV_MAX_SETS)
				return err_set(e, "PROF_SET has more than %d overrides",
					       ENV_MAX_SETS);
			env->sets[n++] = p;
		}
	}
	env->sets[n] = NULL;

	env_first_int(rank_vars, 0, &env->rank);
	env_first_int(size_vars, 1, &env->world_size);
	return 0;
}

void env_free(struct host_env *env)
{
	free(env->set_buf);
	env->set_buf = NULL;
	env->sets[0] = NULL;
}
