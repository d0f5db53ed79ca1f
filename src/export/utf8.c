/* utf8 — well-formed UTF-8 (see utf8.h). */
#include "utf8.h"

size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, k;

	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		if (c == 0xE0)
			lo = 0xA0; /* overlong below U+0800 */
		else if (c == 0xED)
			hi = 0x9F; /* surrogates U+D800..DFFF */
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		if (c == 0xF0)
			lo = 0x90; /* overlong below U+10000 */
		else if (c == 0xF4)
			hi = 0x8F; /* above U+10FFFF */
	} else {
		*bad = 1;
		return 0;
	}
	for (k = 1; k <= need; k++) {
		if (k >= n || s[k] < lo || s[k] > hi) {
			*bad = k;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need + 1;
}
