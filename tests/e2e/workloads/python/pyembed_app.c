/*
 * pyembed_app — a C program linked with libpython.
 *
 *   pyembed_app noinit   never starts the interpreter: sleeps 300 ms, exits 0
 *   pyembed_app init     starts it after 200 ms and runs Python code that
 *                        waits (up to 5 s) for profhost's bridge to appear
 *                        in sys.modules; prints "bridge up" or "bridge
 *                        missing", exits 0
 *
 * The CPython API is declared here rather than taken from Python.h, so the
 * program builds wherever the shared libpython is installed.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void Py_Initialize(void);
int Py_FinalizeEx(void);
int PyRun_SimpleStringFlags(const char *code, void *flags);

static const char code[] =
	"import sys, time\n"
	"t0 = time.monotonic()\n"
	"while 'profhost._bridge' not in sys.modules and time.monotonic() - t0 < 5:\n"
	"    time.sleep(0.005)\n"
	"print('bridge up' if 'profhost._bridge' in sys.modules else 'bridge missing')\n"
	"sys.stdout.flush()\n";

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "init") != 0) {
		usleep(300000);
		puts("never initialized");
		return 0;
	}
	usleep(200000);
	Py_Initialize();
	if (PyRun_SimpleStringFlags(code, NULL) != 0)
		return 1;
	return Py_FinalizeEx() < 0 ? 1 : 0;
}
