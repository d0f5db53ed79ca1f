/*
 * prof — the profhost command: dispatches to a subcommand (see cli.h and
 * docs/cli.md).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
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

/* Reports a usage error of the top level on stderr; returns the exit status. */
static int prof_usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "prof: %s '%s' (usage: %s; prof --help for more)\n",
		what, arg, cli_run_synopsis);
	return CLI_EXIT_USAGE;
}

int cli_usage_error(const char *cmd, const char *synopsis, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "prof %s: %s (usage: %s)\n", cmd, msg, synopsis);
	return CLI_EXIT_USAGE;
}

int cli_option(int argc, char **argv, int *i, char shortname, const char *longname,
	       const char **val)
{
	const char *a = argv[*i];
	size_t n = strlen(longname);

	if (shortname && a[0] == '-' && a[1] == shortname) {
		if (a[2] != '\0') {
			*val = a + 2;
			return 1;
		}
	} else if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, longname, n) == 0) {
		if (a[2 + n] == '=') {
			*val = a + 3 + n;
			return 1;
		}
		if (a[2 + n] != '\0')
			return 0;
	} else {
		return 0;
	}
	if (*i + 1 >= argc)
		return -1;
	*i += 1;
	*val = argv[*i];
	return 1;
}

bool cli_prof_disabled(const char *v)
{
	static const char *const enabling[] = { "", "0", "false", "no", "off" };
	size_t i;

	if (!v)
		return false;
	for (i = 0; i < sizeof enabling / sizeof enabling[0]; i++)
		if (strcasecmp(v, enabling[i]) == 0)
			return false;
	return true;
}

int main(int argc, char **argv)
{
	const char *cmd;

	if (argc < 2) {
		fprintf(stderr, "prof: missing command (usage: %s; prof --help for more)\n",
			cli_run_synopsis);
		return CLI_EXIT_USAGE;
	}
	cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		prof_help(stdout);
		return 0;
	}
	if (strcmp(cmd, "help") == 0) {
		if (argc == 2) {
			prof_help(stdout);
			return 0;
		}
		if (strcmp(argv[2], "run") == 0) {
			cli_run_help(stdout);
			return 0;
		}
		if (strcmp(argv[2], "attach") == 0) {
			cli_attach_help(stdout);
			return 0;
		}
		if (strcmp(argv[2], "report") == 0) {
			cli_report_help(stdout);
			return 0;
		}
		if (strcmp(argv[2], "salvage") == 0) {
			cli_salvage_help(stdout);
			return 0;
		}
		if (strcmp(argv[2], "capture") == 0) {
			cli_capture_help(stdout);
			return 0;
		}
		if (strcmp(argv[2], "install-python") == 0) {
			cli_install_python_help(stdout);
			return 0;
		}
		return prof_usage_error("no help for unknown command", argv[2]);
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("prof (profhost) %s\n", PROFHOST_VERSION);
		return 0;
	}
	if (strcmp(cmd, "run") == 0)
		return cli_run_main(argc - 1, argv + 1);
	if (strcmp(cmd, "report") == 0)
		return cli_report_main(argc - 1, argv + 1);
	if (strcmp(cmd, "attach") == 0)
		return cli_attach_main(argc - 1, argv + 1);
	if (strcmp(cmd, "salvage") == 0)
		return cli_salvage_main(argc - 1, argv + 1);
	if (strcmp(cmd, "capture") == 0)
		return cli_capture_main(argc - 1, argv + 1);
	if (strcmp(cmd, "install-python") == 0)
		return cli_install_python_main(argc - 1, argv + 1);
	if (cmd[0] == '-')
		return prof_usage_error("unknown option", cmd);
	return prof_usage_error("unknown command", cmd);
}
