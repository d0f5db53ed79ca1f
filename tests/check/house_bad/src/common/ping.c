/* house.py's bad tree: ping.c and pong.c call each other (rule "calls"),
 * and ping.c includes from src/host, above src/common (rule "includes"). */
#include "../host/pong.h"

int house_bad_ping(int n);

int house_bad_ping(int n)
{
	return n > 0 ? house_bad_pong(n - 1) : 0;
}
