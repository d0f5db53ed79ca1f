/*
 * nvtx_registry — domains, registered strings, category and thread names
 * of the shim's NVTX side (see nvtx_registry.h). In the shim: libc only.
 *
 * One mutex, `names_lock`, guards every table here and the config the
 * match bits are computed from. Domains are also published in an array of
 * atomics (read without the lock by nvtx_domain_name); registered strings
 * live in a chained hash table by (domain, text).
 */
#include "nvtx_registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "salvmods.h"
#include "../common/grow.h"
#include "../common/hash.h"

/* A named thing (category, thread) in a small table; `key` identifies it. */
struct nvtx_name {
	uint64_t key;
	char *name;
};

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct nvtx_config *names_cfg;  /* names_lock; NULL: none yet */
static _Atomic(struct nvtx_domain *) domains[NVTX_MAX_DOMAINS];
static _Atomic uint32_t ndomains = 1;        /* id 0 is the default domain */
static struct nvtx_string **strings;         /* hash table, names_lock */
static size_t nstrings, cap_strings;
static struct nvtx_name *categories, *thread_names; /* names_lock */
static size_t ncategories, cap_categories, nthread_names, cap_thread_names;
static struct salv_header *names_salv;       /* names_lock; NULL: no file */

/* The hash of a registered string: FNV-1a of its bytes, seeded with its
 * domain. */
static uint64_t hash_string(uint32_t domain, const char *s, size_t len)
{
	return hash_fnv64(HASH_FNV64_SEED ^ domain, s, len);
}

/* Creates (or finds) domain `name`, taking ownership of it. names_lock. */
static struct nvtx_domain *domain_create_locked(char *name)
{
	uint32_t n = atomic_load_explicit(&ndomains, memory_order_relaxed), i;
	struct nvtx_domain *d;

	if (!name)
		return NULL;
	for (i = 1; i < n; i++) {
		d = atomic_load_explicit(&domains[i], memory_order_relaxed);
		if (d && strcmp(d->name, name) == 0) {
			free(name);
			return d;
		}
	}
	if (n >= NVTX_MAX_DOMAINS || !(d = calloc(1, sizeof *d))) {
		free(name);
		return NULL; /* the default domain */
	}
	d->magic = DOMAIN_MAGIC;
	d->id = n;
	d->name = name;
	atomic_store_explicit(&d->match, domain_match(names_cfg, name), memory_order_relaxed);
	atomic_store_explicit(&domains[n], d, memory_order_release);
	atomic_store_explicit(&ndomains, n + 1, memory_order_release);
	salvmods_name(names_salv, SALV_NAME_DOMAIN, n, 0, name);
	return d;
}

struct nvtx_domain *nvtx_registry_domain(char *name)
{
	struct nvtx_domain *d;

	pthread_mutex_lock(&names_lock);
	d = domain_create_locked(name);
	pthread_mutex_unlock(&names_lock);
	return d;
}

/* Grows the string table to at least twice its entries. names_lock. */
static int strings_grow(void)
{
	size_t cap = cap_strings ? cap_strings * 2 : 256, i;
	struct nvtx_string **t = calloc(cap, sizeof *t);

	if (!t)
		return -1;
	for (i = 0; i < cap_strings; i++) {
		struct nvtx_string *s = strings[i], *next;
		for (; s; s = next) {
			size_t b = hash_string(s->domain, s->s, s->len) & (cap - 1);
			next = s->next;
			s->next = t[b];
			t[b] = s;
		}
	}
	free(strings);
	strings = t;
	cap_strings = cap;
	return 0;
}

struct nvtx_string *nvtx_registry_string(uint32_t domain, char *text)
{
	struct nvtx_string *s = NULL;
	size_t len, b;

	if (!text)
		return NULL;
	len = strlen(text);
	pthread_mutex_lock(&names_lock);
	if (nstrings >= cap_strings / 2 && strings_grow() != 0 && !cap_strings)
		goto out;
	b = hash_string(domain, text, len) & (cap_strings - 1);
	for (s = strings[b]; s; s = s->next)
		if (s->domain == domain && s->len == len && memcmp(s->s, text, len) == 0)
			goto out;
	s = malloc(sizeof *s + len + 1);
	if (!s)
		goto out;
	s->magic = STRING_MAGIC;
	s->domain = domain;
	s->len = (uint32_t)len;
	memcpy(s->s, text, len + 1);
	atomic_store_explicit(&s->match, string_match(names_cfg, text, len),
			      memory_order_relaxed);
	s->next = strings[b];
	strings[b] = s;
	nstrings++;
out:
	pthread_mutex_unlock(&names_lock);
	free(text);
	return s;
}

/* Sets key's name in a table (owned `name`; the old one is kept, since a
 * reader may hold it). names_lock. */
static void name_set_locked(struct nvtx_name **tab, size_t *n, size_t *cap,
			    uint64_t key, char *name)
{
	struct nvtx_name *p;
	size_t i;

	for (i = 0; i < *n; i++)
		if ((*tab)[i].key == key) {
			if (strcmp((*tab)[i].name, name) == 0)
				free(name);
			else
				(*tab)[i].name = name;
			return;
		}
	p = grow_array(*tab, cap, *n + 1, sizeof *p, 16);
	if (!p) {
		free(name);
		return;
	}
	*tab = p;
	(*tab)[*n].key = key;
	(*tab)[*n].name = name;
	(*n)++;
}

/* The name of `key` in a table, or NULL. names_lock. */
static const char *name_get_locked(const struct nvtx_name *tab, size_t n, uint64_t key)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (tab[i].key == key)
			return tab[i].name;
	return NULL;
}

void nvtx_registry_string_text(const void *maybe, char *out, size_t size)
{
	size_t b, n;

	out[0] = '\0';
	pthread_mutex_lock(&names_lock);
	for (b = 0; b < cap_strings; b++) {
		const struct nvtx_string *s;

		for (s = strings[b]; s; s = s->next) {
			if ((const void *)s != maybe)
				continue;
			n = s->len < size - 1 ? s->len : size - 1;
			memcpy(out, s->s, n);
			out[n] = '\0';
			pthread_mutex_unlock(&names_lock);
			return;
		}
	}
	pthread_mutex_unlock(&names_lock);
}

void nvtx_registry_category(uint32_t domain, uint32_t category, char *name)
{
	uint64_t key = (uint64_t)domain << 32 | category;

	const char *old;

	if (!name)
		return;
	pthread_mutex_lock(&names_lock);
	old = name_get_locked(categories, ncategories, key);
	if (!old || strcmp(old, name) != 0)
		salvmods_name(names_salv, SALV_NAME_CATEGORY, domain, category, name);
	name_set_locked(&categories, &ncategories, &cap_categories, key, name);
	pthread_mutex_unlock(&names_lock);
}

void nvtx_registry_salvage(struct salv_header *h)
{
	uint32_t n, i;
	size_t k;

	pthread_mutex_lock(&names_lock);
	if (names_salv == h) {
		pthread_mutex_unlock(&names_lock);
		return;
	}
	names_salv = h;
	n = atomic_load(&ndomains);
	for (i = 1; i < n && h; i++) {
		struct nvtx_domain *d = atomic_load(&domains[i]);

		if (d)
			salvmods_name(h, SALV_NAME_DOMAIN, i, 0, d->name);
	}
	for (k = 0; k < ncategories && h; k++)
		salvmods_name(h, SALV_NAME_CATEGORY, (uint32_t)(categories[k].key >> 32),
			      (uint32_t)categories[k].key, categories[k].name);
	pthread_mutex_unlock(&names_lock);
}

void nvtx_registry_thread(uint32_t tid, char *name)
{
	if (!name)
		return;
	pthread_mutex_lock(&names_lock);
	name_set_locked(&thread_names, &nthread_names, &cap_thread_names, tid, name);
	pthread_mutex_unlock(&names_lock);
}

void nvtx_registry_rematch(const struct nvtx_config *c)
{
	uint32_t n;
	size_t i;

	pthread_mutex_lock(&names_lock);
	names_cfg = c;
	n = atomic_load(&ndomains);
	for (i = 1; i < n; i++) {
		struct nvtx_domain *d = atomic_load(&domains[i]);
		if (d)
			atomic_store(&d->match, domain_match(c, d->name));
	}
	for (i = 0; i < cap_strings; i++) {
		struct nvtx_string *s;
		for (s = strings[i]; s; s = s->next)
			atomic_store(&s->match, string_match(c, s->s, s->len));
	}
	pthread_mutex_unlock(&names_lock);
}

const char *nvtx_domain_name(uint32_t id)
{
	struct nvtx_domain *d;

	if (id == 0)
		return NVTX_DEFAULT_DOMAIN;
	if (id >= atomic_load_explicit(&ndomains, memory_order_acquire))
		return NULL;
	d = atomic_load_explicit(&domains[id], memory_order_acquire);
	return d ? d->name : NULL;
}

const char *nvtx_category_name(uint32_t domain, uint32_t category)
{
	const char *s;

	pthread_mutex_lock(&names_lock);
	s = name_get_locked(categories, ncategories, (uint64_t)domain << 32 | category);
	pthread_mutex_unlock(&names_lock);
	return s;
}

const char *nvtx_thread_name(int32_t tid)
{
	const char *s;

	pthread_mutex_lock(&names_lock);
	s = name_get_locked(thread_names, nthread_names, (uint32_t)tid);
	pthread_mutex_unlock(&names_lock);
	return s;
}
