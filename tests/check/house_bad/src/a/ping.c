/* house.py's bad tree: ping.c and pong.c call each other (rule "calls"). */
int house_bad_pong(int n);
int house_bad_ping(int n);

int house_bad_ping(int n)
{
	return n > 0 ? house_bad_pong(n - 1) : 0;
}
