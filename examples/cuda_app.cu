// cuda_app — a small CUDA program to look at under profhost, and the native
// half of scripts/gpu-smoke.sh.
//
//   prof run -s examples/profile.lua -- build/bin/cuda_app [steps] [hang]
//
// Each step: copies a batch to the GPU, runs "forward" (a saxpy and a
// reduction kernel, inside a profhost range and an NVTX range), replays a
// CUDA graph of two kernels, clears a buffer, copies the result back, and
// calls prof_step(). With "hang", step 10 also launches a kernel that spins
// for about 4 s (inside the range "stuck"), so that a watchdog sees a stalled
// step with a kernel in flight. It runs the same without profhost: the prof_*
// functions are looked up at run time.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CHECK(call)                                                          \
	do {                                                                 \
		cudaError_t err_ = (call);                                   \
		if (err_ != cudaSuccess) {                                   \
			std::fprintf(stderr, "cuda_app: %s: %s\n", #call,    \
				     cudaGetErrorString(err_));              \
			std::exit(1);                                        \
		}                                                            \
	} while (0)

static void (*p_step)(void);
static void (*p_push)(const char *);
static void (*p_pop)(void);

static void nop(void) {}
static void nop_s(const char *) {}

__global__ void saxpy(int n, float a, const float *x, float *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * x[i] + y[i];
}

__global__ void block_sum(int n, const float *x, float *out)
{
	__shared__ float part[256];
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	part[threadIdx.x] = i < n ? x[i] : 0.0f;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			part[threadIdx.x] += part[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = part[0];
}

__global__ void scale(int n, float a, float *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] *= a;
}

// Spins one thread for `ns` nanoseconds of the GPU's global timer.
__global__ void spin(unsigned long long ns)
{
	unsigned long long t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

int main(int argc, char **argv)
{
	const int n = 1 << 22, threads = 256, blocks = (n + threads - 1) / threads;
	int steps = argc > 1 ? std::atoi(argv[1]) : 20;
	bool hang = argc > 2 && std::strcmp(argv[2], "hang") == 0;
	float *hx, *hy, *dx, *dy, *dsum;
	cudaStream_t stream;
	cudaGraph_t graph;
	cudaGraphExec_t exec;

	p_step = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_step");
	p_push = (void (*)(const char *))dlsym(RTLD_DEFAULT, "prof_range_push");
	p_pop = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_range_pop");
	if (!p_step) p_step = nop;
	if (!p_push) p_push = nop_s;
	if (!p_pop) p_pop = nop;

	CHECK(cudaMallocHost(&hx, n * sizeof(float)));
	CHECK(cudaMallocHost(&hy, n * sizeof(float)));
	for (int i = 0; i < n; i++) {
		hx[i] = 1.0f;
		hy[i] = 2.0f;
	}
	CHECK(cudaMalloc(&dx, n * sizeof(float)));
	CHECK(cudaMalloc(&dy, n * sizeof(float)));
	CHECK(cudaMalloc(&dsum, blocks * sizeof(float)));
	CHECK(cudaStreamCreate(&stream));

	// A graph of two kernels, captured once, replayed every step.
	CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
	scale<<<blocks, threads, 0, stream>>>(n, 0.5f, dy);
	scale<<<blocks, threads, 0, stream>>>(n, 2.0f, dy);
	CHECK(cudaStreamEndCapture(stream, &graph));
	CHECK(cudaGraphInstantiate(&exec, graph, 0));

	for (int s = 0; s < steps; s++) {
		CHECK(cudaMemcpyAsync(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice, stream));
		CHECK(cudaMemcpyAsync(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice, stream));
		p_push("forward");
		nvtxRangePushA("nvtx_forward");
		saxpy<<<blocks, threads, 0, stream>>>(n, 3.0f, dx, dy);
		block_sum<<<blocks, threads, 0, stream>>>(n, dy, dsum);
		nvtxRangePop();
		p_pop();
		CHECK(cudaGraphLaunch(exec, stream));
		CHECK(cudaMemsetAsync(dsum, 0, blocks * sizeof(float), stream));
		if (hang && s == 10) {
			p_push("stuck");
			spin<<<1, 1, 0, stream>>>(4000000000ULL);
			CHECK(cudaStreamSynchronize(stream));
			p_pop();
		}
		CHECK(cudaMemcpyAsync(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
		CHECK(cudaStreamSynchronize(stream));
		p_step();
	}
	std::printf("cuda_app: y[0] = %g after %d steps\n", hy[0], steps);
	CHECK(cudaGraphExecDestroy(exec));
	CHECK(cudaGraphDestroy(graph));
	CHECK(cudaStreamDestroy(stream));
	CHECK(cudaFree(dx));
	CHECK(cudaFree(dy));
	CHECK(cudaFree(dsum));
	CHECK(cudaFreeHost(hx));
	CHECK(cudaFreeHost(hy));
	return 0;
}
