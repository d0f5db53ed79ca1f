/*
 * cupti_driver — what the process's CUDA driver and runtime are asked
 * (cupti_internal.h), never loaded by profhost nor initialised (no
 * cuInit): whether the driver is up, the devices' properties when CUPTI
 * wrote no DEVICE record, cudaProfilerStart/Stop for Nsight Systems.
 */
#include "cupti_internal.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

typedef CUresult (CUDAAPI *dev_count_fn)(int *);
typedef CUresult (CUDAAPI *dev_get_fn)(CUdevice *, int);
typedef CUresult (CUDAAPI *dev_name_fn)(char *, int, CUdevice);
typedef CUresult (CUDAAPI *dev_mem_fn)(size_t *, CUdevice);
typedef CUresult (CUDAAPI *dev_attr_fn)(int *, CUdevice_attribute, CUdevice);

/* A function of the CUDA driver the process has loaded (never loads it),
 * or NULL. What loaded the driver holds it: it is not unloaded while the
 * process runs. Any thread. */
static void *driver_sym(const char *name)
{
	void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *f = dlsym(lib ? lib : RTLD_DEFAULT, name);

	if (lib)
		dlclose(lib);
	return f;
}

/* Whether the process's CUDA driver is initialised (cuInit ran). cu->lock
 * held (cu_step, until it is). */
bool cupti_driver_up(void)
{
	static dev_count_fn count;
	int n;

	if (!count)
		count = (dev_count_fn)driver_sym("cuDeviceGetCount");
	return count && count(&n) == CUDA_SUCCESS;
}

/* The driver's attributes that fill a DEVICE record's fields (all
 * uint32_t), by the field's offset. */
static const struct {
	CUdevice_attribute attr;
	size_t field;
} dev_fields[] = {
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
	  offsetof(CUpti_ActivityDevice5, computeCapabilityMajor) },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
	  offsetof(CUpti_ActivityDevice5, computeCapabilityMinor) },
	{ CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
	  offsetof(CUpti_ActivityDevice5, maxThreadsPerBlock) },
	{ CU_DEVICE_ATTRIBUTE_WARP_SIZE, offsetof(CUpti_ActivityDevice5, numThreadsPerWarp) },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
	  offsetof(CUpti_ActivityDevice5, maxRegistersPerBlock) },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
	  offsetof(CUpti_ActivityDevice5, maxRegistersPerMultiprocessor) },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
	  offsetof(CUpti_ActivityDevice5, maxSharedMemoryPerBlock) },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
	  offsetof(CUpti_ActivityDevice5, maxSharedMemoryPerMultiprocessor) },
	{ CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
	  offsetof(CUpti_ActivityDevice5, numMultiprocessors) },
};

/* CUPTI writes a DEVICE record when a context is created while the kind
 * is on: GPU capture that starts later (at a window's warm-up, with the
 * program's context made long before) gets none, and the trace would have
 * no deviceProperties (nor the summary a GPU's peak). Then the devices
 * come from the driver, as the same record made up from its attributes.
 * Only a driver the process loaded and initialised is asked (never
 * cuInit); until it answers, it is asked again at the next collect. Host
 * thread. */
void cupti_devices_from_driver(void)
{
	dev_count_fn count = (dev_count_fn)driver_sym("cuDeviceGetCount");
	dev_get_fn get = (dev_get_fn)driver_sym("cuDeviceGet");
	dev_name_fn name = (dev_name_fn)driver_sym("cuDeviceGetName");
	dev_mem_fn mem = (dev_mem_fn)driver_sym("cuDeviceTotalMem_v2");
	dev_attr_fn attr = (dev_attr_fn)driver_sym("cuDeviceGetAttribute");
	char text[256];
	int n = 0, i;

	if (count && get && name && mem && attr && count(&n) == CUDA_SUCCESS) {
		cu->devices_asked = true;
		for (i = 0; i < n && i < 64; i++) {
			CUpti_ActivityDevice5 d;
			CUdevice dev;
			size_t bytes = 0, k;
			int threads = 0;

			if (get(&dev, i) != CUDA_SUCCESS)
				continue;
			memset(&d, 0, sizeof d);
			d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
			d.id = (uint32_t)i;
			if (name(text, (int)sizeof text, dev) != CUDA_SUCCESS)
				text[0] = '\0';
			text[sizeof text - 1] = '\0';
			d.name = text;
			if (mem(&bytes, dev) == CUDA_SUCCESS)
				d.globalMemorySize = bytes;
			for (k = 0; k < sizeof dev_fields / sizeof dev_fields[0]; k++) {
				int v = 0;
				uint32_t u;

				if (attr(&v, dev_fields[k].attr, dev) != CUDA_SUCCESS || v <= 0)
					continue;
				u = (uint32_t)v;
				memcpy((char *)&d + dev_fields[k].field, &u, sizeof u);
			}
			if (attr(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
				 dev) == CUDA_SUCCESS && threads > 0 && d.numThreadsPerWarp)
				d.maxWarpsPerMultiprocessor = (uint32_t)threads / d.numThreadsPerWarp;
			cupti_devices_note(&cu->devices, &d);
		}
	}
}

/* cudaProfilerStart/Stop of the process's CUDA runtime, once it has one
 * (else the driver's cuProfilerStart/Stop). */
void cupti_nsys_find(void)
{
	FILE *f;
	char line[4352];

	if (cu->profiler_start)
		return;
	cu->profiler_start = (int (*)(void))dlsym(RTLD_DEFAULT, "cudaProfilerStart");
	cu->profiler_stop = (int (*)(void))dlsym(RTLD_DEFAULT, "cudaProfilerStop");
	if (cu->profiler_start && cu->profiler_stop)
		return;
	cu->profiler_start = NULL;
	f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f)) {
		char *path = strchr(line, '/');
		void *lib;

		if (!path || !strstr(path, "libcudart"))
			continue;
		path[strcspn(path, "\n")] = '\0';
		lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
		if (!lib)
			continue;
		cu->profiler_start = (int (*)(void))dlsym(lib, "cudaProfilerStart");
		cu->profiler_stop = (int (*)(void))dlsym(lib, "cudaProfilerStop");
		if (cu->profiler_start && cu->profiler_stop)
			break;
		cu->profiler_start = NULL;
	}
	if (f)
		fclose(f);
	if (!cu->profiler_start) {
		/* A program with the static runtime: the driver's calls, which
		 * nsys's capture range watches as well. */
		void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);

		if (lib) {
			cu->profiler_start = (int (*)(void))dlsym(lib, "cuProfilerStart");
			cu->profiler_stop = (int (*)(void))dlsym(lib, "cuProfilerStop");
			if (!cu->profiler_stop)
				cu->profiler_start = NULL;
		}
	}
}
