/*
 * usr1_preload — a library that installs a SIGUSR1 handler from its
 * constructor, for the REPL's chaining test. Preloaded after libprofhost.so
 * (LD_PRELOAD=libprofhost.so:usr1_preload.so) its constructor runs first,
 * so profhost finds the application's handler already there. The handler
 * writes "app handler ran" on stderr.
 */
#include <signal.h>
#include <unistd.h>

static void usr1_preload_handler(int sig)
{
	static const char msg[] = "app handler ran\n";

	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
		/* nothing to do in a handler */
	}
}

__attribute__((constructor)) static void usr1_preload_init(void)
{
	struct sigaction sa = { 0 };

	sa.sa_handler = usr1_preload_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
}
