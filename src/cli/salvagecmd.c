/*
 * salvage — `prof salvage [-o DIR] FILE`: writes what a dead process
 * recorded in its salvage file as a window folder and removes the file
 * (salvwrite.c, under the rules for untrusted files stated there), or with
 * `--all` every salvage file of this user's processes that ended
 * (orphans.c). docs/recorder.md.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../common/err.h"
#include "cli.h"
#include "cliopt.h"
#include "orphans.h"
#include "salvwrite.h"

static const char salvage_synopsis[] =
	"prof salvage [-o DIR] FILE | prof salvage --all [--discard] [-o DIR] [FOLDER...]";

/* Writes the help of `prof salvage` to `out`. */
static void salvage_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Writes what a process held in its salvage file (a window recording,\n"
		"or the flight recorder's last steps) when it died of SIGKILL or ended\n"
		"in _exit(): a window folder under the run's rank folder, as the\n"
		"process would have written it, marked \"salvaged\" in summary.txt and\n"
		"the trace's metadata, GPU work from the recorder's CUPTI records\n"
		"included. Then removes the file. `prof run` does this by\n"
		"itself; this is for processes started without it (the files are\n"
		"/dev/shm/profhost-<pid>-<time>.salvage, or in PROF_SALVAGE_DIR).\n"
		"\n"
		"Only your own salvage files are read. The run folder a file names is\n"
		"used when it is an absolute path without '.', '..' or symbolic links,\n"
		"in a folder of yours that no one else can write; else the file is\n"
		"refused, and -o DIR writes it to DIR/<run> instead.\n"
		"\n"
		"  -o DIR      write the run folder in DIR (created if missing)\n"
		"  --all       every salvage file of your processes that ended, in\n"
		"              PROF_SALVAGE_DIR and /dev/shm (with the folders of\n"
		"              `prof run`s that ended there), or in the FOLDERs named\n"
		"  --discard   with --all: remove those files without salvaging them\n",
		salvage_synopsis);
}

/* `prof salvage`: see cli_salvage_cmd in cli.h. */
static int salvage_main(int argc, char **argv)
{
	struct salvwrite_opts o = { .who = "prof salvage", .how = "after its process ended" };
	const char *file = NULL, *val;
	bool all = false, discard = false, options = true;
	int i, rc, nfolders = 0;
	struct err e;

	for (i = 1; i < argc; i++) {
		if (!options || argv[i][0] != '-' || !argv[i][1]) {
			/* FILE, or with --all a FOLDER (moved to the front of argv) */
			if (!file)
				file = argv[i];
			argv[++nfolders] = argv[i];
			continue;
		}
		if (strcmp(argv[i], "--") == 0) {
			options = false;
		} else if (cliopt_help(&cli_salvage_cmd, argv[i])) {
			return 0;
		} else if (strcmp(argv[i], "--all") == 0) {
			all = true;
		} else if (strcmp(argv[i], "--discard") == 0) {
			discard = true;
		} else {
			rc = cliopt_value(argc, argv, &i, 'o', "output", &val);
			if (rc < 0)
				return cliopt_usage_error(&cli_salvage_cmd, "-o needs a DIR");
			if (rc == 0)
				return cliopt_usage_error(&cli_salvage_cmd, "unknown option '%s'", argv[i]);
			o.out_dir = val;
		}
	}
	if (discard && !all)
		return cliopt_usage_error(&cli_salvage_cmd, "--discard goes with --all");
	if (discard && o.out_dir)
		return cliopt_usage_error(&cli_salvage_cmd,
					  "--discard writes nothing: no -o with it");
	if (all)
		return orphans_salvage_all((const char *const *)argv + 1, nfolders, discard, &o);
	if (!file || nfolders > 1)
		return cliopt_usage_error(&cli_salvage_cmd, "%s", !file ? "missing FILE"
					  : "one FILE at a time (or --all)");
	switch ((rc = salvwrite_file(file, &o, &e))) {
	case 0:
		return 0;
	case 1:
	case 2:
		salvwrite_say_removed(o.who, file, rc);
		return 0;
	default:
		fprintf(stderr, "prof salvage: %s\n", e.msg);
		return 1;
	}
}

const struct cli_cmd cli_salvage_cmd = { "salvage", salvage_main, salvage_help,
					 salvage_synopsis };
