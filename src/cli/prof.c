/*
 * prof — the profhost command: dispatches to a subcommand, through the
 * table below, and says the top level's help, version and usage errors
 * (see cli.h and docs/cli.md).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cliopt.h"
#include "version.h"

/* Writes the top-level help to `out`. */
static void prof_help(FILE *out)
{
	fprintf(out,
		"usage: prof run [-s policy.lua] [-o dir] [--set key=value]... [--] cmd args...\n"
		"       prof report <window-or-run-dir | file> [--script report.lua]\n"
		"                   [--format text|json|html] [-o file]\n"
		"       prof attach [-e code] PID\n"
		"       prof capture RUN [--steps N] [--first STEP] [--lead S] [--wait S]\n"
		"       prof salvage [-o DIR] FILE | --all [--discard] [-o DIR] [FOLDER...]\n"
		"       prof install-python [--python PATH] [--uninstall]\n"
		"       prof --help | --version\n"
		"\n"
		"Runs a program under profhost, the profiling host: the library is preloaded\n"
		"into the program and its Lua policy file decides when to capture and what to\n"
		"write.\n"
		"\n"
		"commands:\n"
		"  run       run a command under the host (prof run --help for its options)\n"
		"  report    run the reports on saved output (prof report --help)\n"
		"  attach    open a Lua prompt inside a running profiled process\n"
		"            (prof attach --help for its options)\n"
		"  capture   every process of a run (every rank, every host) records\n"
		"            the same steps (prof capture --help)\n"
		"  salvage   write what a killed process left in its salvage file\n"
		"            (prof salvage --help)\n"
		"  install-python  make PROF_SCRIPT=policy.lua python ... work without\n"
		"            LD_PRELOAD (prof install-python --help)\n"
		"  help      show this help (prof help run: the help of run)\n"
		"\n"
		"options:\n"
		"  -h, --help     show this help\n"
		"  --version      print the version\n");
}

/* The subcommands, by name. */
static const struct cli_cmd *const prof_cmds[] = {
	&cli_run_cmd, &cli_report_cmd, &cli_attach_cmd, &cli_salvage_cmd,
	&cli_capture_cmd, &cli_install_python_cmd,
};

/* The subcommand named `name`, or NULL. */
static const struct cli_cmd *prof_find(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof prof_cmds / sizeof prof_cmds[0]; i++)
		if (strcmp(prof_cmds[i]->name, name) == 0)
			return prof_cmds[i];
	return NULL;
}

/* Reports a usage error of the top level on stderr; returns the exit status. */
static int prof_usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "prof: %s '%s' (usage: %s; prof --help for more)\n",
		what, arg, cli_run_cmd.synopsis);
	return CLI_EXIT_USAGE;
}

/* `prof help [CMD]`: the top level's help, or CMD's. Returns the exit
 * status. */
static int prof_help_cmd(int argc, char **argv)
{
	const struct cli_cmd *c;

	if (argc == 2) {
		prof_help(stdout);
		return 0;
	}
	c = prof_find(argv[2]);
	if (!c)
		return prof_usage_error("no help for unknown command", argv[2]);
	c->help(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	const struct cli_cmd *c;
	const char *cmd;

	if (argc < 2) {
		fprintf(stderr, "prof: missing command (usage: %s; prof --help for more)\n",
			cli_run_cmd.synopsis);
		return CLI_EXIT_USAGE;
	}
	cmd = argv[1];
	if (cliopt_is_help(cmd)) {
		prof_help(stdout);
		return 0;
	}
	if (strcmp(cmd, "help") == 0)
		return prof_help_cmd(argc, argv);
	if (strcmp(cmd, "--version") == 0) {
		printf("prof (profhost) %s\n", PROFHOST_VERSION);
		return 0;
	}
	c = prof_find(cmd);
	if (c)
		return c->main(argc - 1, argv + 1);
	if (cmd[0] == '-')
		return prof_usage_error("unknown option", cmd);
	return prof_usage_error("unknown command", cmd);
}
