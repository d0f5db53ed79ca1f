/* house.py's bad tree: src/common/ping.c includes this from a higher
 * layer (rule "includes"). */
int house_bad_pong(int n);
