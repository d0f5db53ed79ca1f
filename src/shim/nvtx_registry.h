/*
 * nvtx_registry — the names the shim's NVTX side keeps: domains,
 * registered strings, category names and OS thread names (see nvtx.h).
 *
 * Internal to the shim's NVTX side: included by nvtx.c (the injection and
 * hot path) and nvtx_registry.c only. The hot path reads domains and
 * registered strings through their handles (the structs below, and the
 * inline matchers, so that it stays inline); everything that creates or
 * looks up a name is here, behind one mutex. The NVTX creation calls are
 * rare; no function here is called on a push or pop.
 *
 * Domains and registered strings are allocated once and never freed, so
 * their handles stay valid and the host thread can name the events
 * recorded under them; a domain name created twice is one domain.
 */
#ifndef PROFHOST_NVTX_REGISTRY_H
#define PROFHOST_NVTX_REGISTRY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nvtx.h"

#define NVTX_MAX_DOMAINS 4096 /* domains beyond this share the default one */
#define DOMAIN_MAGIC 0x4e56444du /* "NVDM" */
#define STRING_MAGIC 0x4e565354u /* "NVST" */

/* Match bits of domains and registered strings: which configured triggers
 * (struct nvtx_config) their names satisfy. */
enum {
	MATCH_STEP_RANGE = 1,
	MATCH_STEP_MARK = 2,
	MATCH_CAPTURE = 4
};

/* A domain handle. Id 0 is the default domain (nvtx.c's). */
struct nvtx_domain {
	uint32_t magic;
	uint32_t id;
	_Atomic uint32_t match;  /* MATCH_* this domain satisfies */
	char *name;
};

/* A registered string handle. */
struct nvtx_string {
	uint32_t magic;
	uint32_t domain;
	uint32_t len;
	_Atomic uint32_t match;  /* MATCH_* this string's name satisfies */
	struct nvtx_string *next; /* hash chain */
	char s[];                /* len bytes and a NUL */
};

/* Whether `name` equals trigger `want` (NULL: not configured). */
static inline int name_is(const char *name, size_t len, const char *want)
{
	return want && strlen(want) == len && memcmp(name, want, len) == 0;
}

/* MATCH_* bits a domain named `name` satisfies under c (NULL: none). */
static inline uint32_t domain_match(const struct nvtx_config *c, const char *name)
{
	uint32_t m = 0;

	if (!c)
		return 0;
	if (!c->step_domain || strcmp(c->step_domain, name) == 0)
		m |= MATCH_STEP_RANGE | MATCH_STEP_MARK;
	if (!c->capture_domain || strcmp(c->capture_domain, name) == 0)
		m |= MATCH_CAPTURE;
	return m;
}

/* MATCH_* bits a string satisfies under c (its domain is checked apart). */
static inline uint32_t string_match(const struct nvtx_config *c, const char *s, size_t len)
{
	uint32_t m = 0;

	if (!c)
		return 0;
	if (name_is(s, len, c->step_range))
		m |= MATCH_STEP_RANGE;
	if (name_is(s, len, c->step_mark))
		m |= MATCH_STEP_MARK;
	if (name_is(s, len, c->capture_range))
		m |= MATCH_CAPTURE;
	return m;
}

/* Creates (or finds) domain `name`, taking ownership of it (NULL: none).
 * Returns the domain, or NULL when out of memory or NVTX_MAX_DOMAINS exist
 * (the caller's handle is then the default domain). Any thread. */
struct nvtx_domain *nvtx_registry_domain(char *name);

/* Registers `text` (owned; NULL: none) in domain `domain`; an equal string
 * registered before gives the same handle. Returns it, or NULL when memory
 * ran out. Any thread. */
struct nvtx_string *nvtx_registry_string(uint32_t domain, char *text);

/* Copies the text of registered string `maybe` into out[size] (cut), or
 * "" when `maybe` is not one of the registry's strings: a pointer read
 * from another thread's shadow level may be torn, so it is looked up
 * before it is read. Any thread; takes the registry's lock. */
void nvtx_registry_string_text(const void *maybe, char *out, size_t size);

/* Names category `category` of domain `domain` / kernel thread `tid`
 * (`name` owned; NULL: nothing). A name given again replaces the old one,
 * which is kept (a reader may hold it). Out of memory: the name is lost.
 * Any thread. */
void nvtx_registry_category(uint32_t domain, uint32_t category, char *name);
void nvtx_registry_thread(uint32_t tid, char *name);

/* Recomputes the match bits of every domain (but the default one, which
 * nvtx.c owns) and registered string under `c`, and uses `c` for those
 * created from now on. `c` must stay valid for the life of the process.
 * Called by nvtx_configure; any thread. */
void nvtx_registry_rematch(const struct nvtx_config *c);

struct salv_header;

/* Keeps every domain and category name, those registered so far and
 * those to come, in salvage file h (src/shim/salvmods.h), so that a
 * salvaged trace names them; NULL stops. Any thread. */
void nvtx_registry_salvage(struct salv_header *h);

#endif
