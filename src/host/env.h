/*
 * env — the host's environment variables, read and checked once.
 *
 *   PROF_SCRIPT          policy file (unset: the built-in default policy)
 *   PROF_OUTPUT_DIR      output directory; overrides prof.output{dir}
 *   PROF_LOG             quiet | info (default) | debug
 *   PROF_DISABLE         1 disables profhost (read by the shim)
 *   PROF_STRICT          1: a profhost failure exits the process with
 *                        status 70 instead of being reported and skipped
 *   PROF_SET             --set overrides, one key=value per line
 *   PROF_RUN_ID          run directory name shared by a launch's processes
 *   PROF_LAUNCHER_NOTES  file where the host lists the windows it wrote
 *   PROF_LUA_DIR         profhost's Lua library (default: found next to
 *                        the installed library)
 *   PROF_REPL_SIGNAL     the signal that opens the REPL: USR1 (default),
 *                        USR2, a real-time signal number, or 0 (no REPL)
 *   PROF_REPL_IDLE       seconds before an idle REPL client is dropped
 *                        (default 600; 0 = never)
 *   PROF_PYTHON          0 turns the Python bridge off (default 1)
 *   PROF_CLOCK           monotonic: no TSC; auto (default): the TSC where
 *                        the kernel keeps time with it (read by the shim,
 *                        checked here)
 *   RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK   this process's rank
 *   WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE   the job's size
 */
#ifndef PROFHOST_ENV_H
#define PROFHOST_ENV_H

#include <stdbool.h>

#include "../common/err.h"
#include "../common/log.h"

#define ENV_MAX_SETS 64

struct host_env {
	const char *script;        /* NULL = built-in default */
	const char *output_dir;    /* NULL = from the policy */
	enum log_level log_level;
	bool strict;
	const char *sets[ENV_MAX_SETS + 1]; /* NULL-ended, point into set_buf */
	char *set_buf;             /* malloc'd copy of PROF_SET */
	const char *run_id;        /* NULL = generate */
	const char *notes;         /* NULL = none */
	const char *salvage_dir;   /* the salvage file's folder; NULL =
				      /dev/shm (PROF_SALVAGE_DIR) */
	const char *lua_dir;       /* NULL = next to the library */
	bool python;               /* start the Python bridge (PROF_PYTHON) */
	int rank, world_size;
	const char *master_addr;   /* the job's rendezvous (torch's
				      MASTER_ADDR, MASTER_PORT); NULL: none */
	const char *master_port;
	int repl_signal;           /* 0 = the REPL is off */
	unsigned repl_idle_s;      /* 0 = never time out */
};

/*
 * Reads the environment into *env. Problems that only need a warning
 * (a malformed rank) are logged and defaulted. Returns 0, or -1 with *e
 * naming the variable, the value and the fix for a value that would make
 * profhost do something the user did not ask for (PROF_LOG=verbose,
 * PROF_STRICT=maybe, too many PROF_SET lines). Start-up thread only.
 */
int env_read(struct host_env *env, struct err *e);

/* Frees what env_read allocated. */
void env_free(struct host_env *env);

#endif
