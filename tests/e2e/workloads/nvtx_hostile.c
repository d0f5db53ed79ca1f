/*
 * nvtx_hostile — NVTX names no writer should trust: quotes, backslashes,
 * newlines and control characters, non-ASCII, invalid UTF-8, a 4 KiB name,
 * wide strings with invalid code points, and the same in a domain name, a
 * registered string, a category name and a thread name. Everything happens
 * inside the NVTX range "hostile" (a capture range for the test).
 */
#include <nvtx3/nvToolsExt.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const names[] = {
	"quote \" backslash \\ slash /",
	"newline \n tab \t cr \r bell \a esc \x1b del \x7f",
	"non-ascii caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
	"invalid \xff\xfe lone \x80 cut \xe4\xb8 end",
	"overlong \xc0\xaf surrogate \xed\xa0\x80",
	"</script><script>alert(1)</script>",
	"",
};

int main(void)
{
	static char big[4097];
	nvtxDomainHandle_t d;
	nvtxStringHandle_t reg;
	nvtxEventAttributes_t a;
	size_t i;

	memset(big, 'x', 4096);
	memcpy(big, "big:", 4);
	d = nvtxDomainCreateA("dom \"quoted\"\n\xff");
	reg = nvtxDomainRegisterStringA(d, "registered \"\\\n\xfe");
	nvtxDomainNameCategoryA(d, 5, "cat \"\n\xff");
	nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), "thread \"\n\xff");

	nvtxRangePushA("hostile");
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		nvtxRangePushA(names[i]);
		nvtxMarkA(names[i]);
		nvtxRangePop();
	}
	nvtxRangePushA(big);
	nvtxRangePop();
	nvtxRangePushW(L"wide \"\n\u00e9 \xdfff \x7fffffff");
	nvtxRangePop();
	memset(&a, 0, sizeof a);
	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.category = 5;
	a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
	a.message.registered = reg;
	nvtxDomainRangePushEx(d, &a);
	nvtxDomainRangePop(d);
	nvtxRangePop();
	puts("nvtx_hostile: done");
	return 0;
}
