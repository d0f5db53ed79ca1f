/*
 * test_cupti_fake — the CUPTI fake keeps the real library's contract, so
 * what profhost's tests prove against it holds against CUPTI: records only
 * for enabled kinds, in the client's buffers, with the CUDA 13 layouts;
 * drops counted when the client gives no buffer; partial buffers on a
 * forced flush; one correlation id for an API call and its GPU work;
 * timestamps from the client's clock; external correlation records before
 * the API record; callbacks with the real cbids; the error modes.
 */
#include <cupti.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cupti_fake.h"

#define NBUF 8
#define BUFSZ 4096

static uint8_t bufs[NBUF][BUFSZ] __attribute__((aligned(8)));
static int nbuf_given, refuse;
static uint8_t *got[64];
static size_t got_valid[64];
static int ngot;

static void CUPTIAPI req(uint8_t **b, size_t *size, size_t *max)
{
	*max = 0;
	if (refuse || nbuf_given == NBUF) {
		*b = NULL;
		*size = 0;
		return;
	}
	*b = bufs[nbuf_given++];
	*size = BUFSZ;
}

static void CUPTIAPI done(CUcontext c, uint32_t s, uint8_t *b, size_t size, size_t valid)
{
	(void)c;
	(void)s;
	(void)size;
	if (ngot < 64) {
		got[ngot] = b;
		got_valid[ngot++] = valid;
	}
}

static uint64_t clock_calls;

static uint64_t CUPTIAPI my_clock(void)
{
	struct timespec ts;

	clock_calls++;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Counts the records of each kind in the delivered buffers; returns the
 * total, copying up to `max` records into out[]. */
static int collect(CUpti_Activity **out, int max, int *per_kind)
{
	int i, n = 0;

	memset(per_kind, 0, sizeof(int) * CUPTI_ACTIVITY_KIND_COUNT);
	for (i = 0; i < ngot; i++) {
		CUpti_Activity *r = NULL;

		while (cuptiActivityGetNextRecord(got[i], got_valid[i], &r) == CUPTI_SUCCESS) {
			if (n < max)
				out[n] = r;
			n++;
			per_kind[r->kind]++;
		}
	}
	return n;
}

static struct {
	int enter, exit;
	uint32_t corr_enter, corr_exit;
	const char *symbol;
	uint32_t cbid;
} seen;

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
			    const void *data)
{
	const CUpti_CallbackData *d = data;

	(void)ud;
	if (dom != CUPTI_CB_DOMAIN_RUNTIME_API)
		return;
	seen.cbid = cbid;
	seen.symbol = d->symbolName;
	if (d->callbackSite == CUPTI_API_ENTER) {
		seen.enter++;
		seen.corr_enter = d->correlationId;
		*d->correlationData = 77;
	} else {
		seen.exit++;
		seen.corr_exit = d->correlationId;
		CHECK_EQ_INT(*d->correlationData, 77);
	}
}

static void test_contract(void)
{
	CUpti_SubscriberHandle sub, sub2;
	CUpti_Activity *recs[256];
	int kinds[CUPTI_ACTIVITY_KIND_COUNT];
	uint32_t corr, version = 0;
	uint64_t ext_id = 0;
	size_t dropped = 1;
	const char *name = NULL;
	int n, i, saw_kernel = 0, saw_api = 0, ext_before_api = 0;
	struct cupti_fake_stats st;

	CHECK_EQ_INT(cuptiGetVersion(&version), CUPTI_SUCCESS);
	CHECK_EQ_INT(version, CUPTI_API_VERSION);
	CHECK_EQ_INT(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API,
					  CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &name),
		     CUPTI_SUCCESS);
	CHECK_EQ_STR(name, "cudaLaunchKernel_v7000");
	CHECK_EQ_INT(cuptiGetResultString(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, &name),
		     CUPTI_SUCCESS);
	CHECK_EQ_STR(name, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES");

	CHECK_EQ_INT(cuptiSubscribe(&sub, on_api, NULL), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiSubscribe(&sub2, on_api, NULL),
		     CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
	CHECK_EQ_INT(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
					 CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000),
		     CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiActivityRegisterTimestampCallback(my_clock), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiActivityRegisterCallbacks(req, done), CUPTI_SUCCESS);

	/* Nothing enabled: a launch writes nothing. */
	cupti_fake_launch("k_off", 1, 5);
	cupti_fake_sync_stream(1);
	CHECK_EQ_INT(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
	CHECK_EQ_INT(ngot, 0);
	CHECK_EQ_INT(seen.enter, 1);
	CHECK_EQ_INT(seen.exit, 1);
	CHECK_EQ_INT(seen.cbid, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
	CHECK_EQ_STR(seen.symbol, "k_off");
	CHECK(seen.corr_enter != 0 && seen.corr_enter == seen.corr_exit);

	CHECK_EQ_INT(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION),
		     CUPTI_SUCCESS);
	clock_calls = 0;
	CHECK_EQ_INT(cuptiActivityPushExternalCorrelationId(
			     CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 4242), CUPTI_SUCCESS);
	corr = cupti_fake_launch("k_on", 3, 50000);
	CHECK_EQ_INT(cuptiActivityPopExternalCorrelationId(
			     CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, &ext_id), CUPTI_SUCCESS);
	CHECK_EQ_INT(ext_id, 4242);
	CHECK_EQ_INT(cuptiActivityPopExternalCorrelationId(
			     CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, NULL),
		     CUPTI_ERROR_QUEUE_EMPTY);
	CHECK(clock_calls > 0);
	/* Not finished yet: a default flush returns the API records only. */
	CHECK_EQ_INT(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
	n = collect(recs, 256, kinds);
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL], 0);
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_RUNTIME], 1);
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION], 1);
	cupti_fake_sync_stream(3);
	CHECK_EQ_INT(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
	n = collect(recs, 256, kinds);
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL], 1);
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_RUNTIME], 2); /* + the sync call */
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION], 1);
	for (i = 0; i < n && i < 256; i++) {
		if (recs[i]->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
			const CUpti_ActivityKernel10 *k = (const void *)recs[i];

			saw_kernel = 1;
			CHECK_EQ_STR(k->name, "k_on");
			CHECK_EQ_INT(k->correlationId, corr);
			CHECK_EQ_INT(k->streamId, 3);
			CHECK_EQ_INT(k->end - k->start, 50000000);
			CHECK(k->start >= my_clock() - 1000000000ull); /* the monotonic clock */
		} else if (recs[i]->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
			const CUpti_ActivityAPI *a = (const void *)recs[i];

			if (a->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
				saw_api = 1;
				CHECK_EQ_INT(a->correlationId, corr);
				CHECK_EQ_INT(a->threadId, (uint32_t)gettid());
				ext_before_api = i > 0 &&
					recs[i - 1]->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
			}
		} else if (recs[i]->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
			const CUpti_ActivityExternalCorrelation *x = (const void *)recs[i];

			CHECK_EQ_INT(x->externalId, 4242);
			CHECK_EQ_INT(x->correlationId, corr);
			CHECK_EQ_INT(x->externalKind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1);
		}
	}
	CHECK(saw_kernel && saw_api && ext_before_api);

	/* No buffer: dropped and counted, the count reset by reading it. */
	refuse = 1;
	ngot = 0;
	cupti_fake_launch("k_dropped", 1, 1);
	cupti_fake_launch("k_dropped", 1, 1);
	cupti_fake_sync_stream(1);
	CHECK_EQ_INT(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped), CUPTI_SUCCESS);
	CHECK_EQ_INT(dropped, 5); /* 2 launches + 2 kernels + 1 sync call */
	CHECK_EQ_INT(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped), CUPTI_SUCCESS);
	CHECK_EQ_INT(dropped, 0);
	refuse = 0;

	/* Disabled again: nothing. Forced flush of unfinished work: zero
	 * timestamps. */
	CHECK_EQ_INT(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME), CUPTI_SUCCESS);
	ngot = 0;
	cupti_fake_launch("k_long", 2, 500000);
	CHECK_EQ_INT(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
	n = collect(recs, 256, kinds);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL], 1);
	if (n == 1) {
		const CUpti_ActivityKernel10 *k = (const void *)recs[0];
		CHECK(k->start == 0 && k->end == 0);
	}
	cupti_fake_get_stats(&st);
	CHECK_EQ_INT(st.ts_before_enable, 1);
	CHECK_EQ_INT(st.subscribed, 1);
	CHECK_EQ_INT(cuptiFinalize(), CUPTI_SUCCESS);
	cupti_fake_get_stats(&st);
	CHECK_EQ_INT(st.enabled_now, 0);
	CHECK_EQ_INT(st.finalizes, 1);
	/* After finalize a new client may subscribe. */
	CHECK_EQ_INT(cuptiSubscribe(&sub, on_api, NULL), CUPTI_SUCCESS);
}

/* Runs `fn` in a child whose fake runs in `mode`; its checks count there. */
static void in_mode(const char *mode, void (*fn)(void))
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		setenv("CUPTI_FAKE_MODE", mode, 1);
		fn();
		_exit(check_failed ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);
}

static void no_driver(void)
{
	CUpti_SubscriberHandle sub;

	CHECK_EQ_INT(cuptiSubscribe(&sub, on_api, NULL), CUPTI_ERROR_UNKNOWN);
	CHECK_EQ_INT(cuptiActivityRegisterTimestampCallback(my_clock), CUPTI_ERROR_UNKNOWN);
	CHECK_EQ_INT(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
		     CUPTI_ERROR_UNKNOWN);
	CHECK_EQ_INT(cupti_fake_init(), -1);
	CHECK_EQ_INT(cupti_fake_launch("k", 1, 1), 0);
}

static void no_privileges(void)
{
	CUpti_SubscriberHandle sub;

	CHECK_EQ_INT(cuptiSubscribe(&sub, on_api, NULL), CUPTI_SUCCESS);
	CHECK_EQ_INT(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
		     CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
}

static void other_subscriber(void)
{
	CUpti_SubscriberHandle sub;

	CHECK_EQ_INT(cuptiSubscribe(&sub, on_api, NULL),
		     CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
}

static void old_version(void)
{
	uint32_t v = 0;

	CHECK_EQ_INT(cuptiGetVersion(&v), CUPTI_SUCCESS);
	CHECK(v < 130000);
}

int main(void)
{
	in_mode("no_driver", no_driver);
	in_mode("insufficient_privileges", no_privileges);
	in_mode("multiple_subscribers", other_subscriber);
	in_mode("old_version", old_version);
	unsetenv("CUPTI_FAKE_MODE");
	test_contract();
	return check_done();
}
