/* house.py's bad tree: pong.c and ping.c call each other (rule "calls"). */
int house_bad_ping(int n);
int house_bad_pong(int n);

int house_bad_pong(int n)
{
	return n > 0 ? house_bad_ping(n - 1) : 1;
}
