/*
 * profenv — how `prof` reads the host's own environment variables (see
 * profenv.h).
 */
#include <stddef.h>
#include <strings.h>

#include "profenv.h"

bool profenv_disabled(const char *v)
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
