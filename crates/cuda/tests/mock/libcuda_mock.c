/* A stand-in for the CUDA driver (libcuda.so.1) used by tests/mock_driver.rs: every entry point
 * sparsetir-cuda resolves, with "device memory" in host memory and the failure the test asks
 * for chosen at compile time: MOCK_MODE 1 = no device, 2 = out of device memory,
 * 3 = the kernel fails while running (CUDA_ERROR_LAUNCH_FAILED at the synchronisation),
 * 4 = none (kernels run and do nothing: what the runtime decides before a launch is seen). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define OK 0
#define NO_DEVICE 100
#define OUT_OF_MEMORY 2
#define LAUNCH_FAILED 719

static int launched = 0;

/* What the last launch and the copies were given, for tests that check what reaches the driver:
 * the stream, the first `record` parameter values (each an 8-byte slot: a pointer parameter's
 * device address), how many host-to-device copies were made and how many context
 * synchronisations. */
static uint64_t last_stream = 0;
static uint64_t last_params[32];
static int record = 0;
static int htod_count = 0;
static int sync_count = 0;
int mock_sync_count(void) { return sync_count; }
void mock_record_params(int n) { record = n < 32 ? n : 32; }
uint64_t mock_last_stream(void) { return last_stream; }
uint64_t mock_last_param(int i) { return i >= 0 && i < 32 ? last_params[i] : 0; }
int mock_htod_count(void) { return htod_count; }

CUresult cuInit(unsigned flags) { (void)flags; return MOCK_MODE == 1 ? NO_DEVICE : OK; }
CUresult cuDriverGetVersion(int* v) { *v = 12080; return OK; }
CUresult cuGetErrorName(CUresult r, const char** s) {
    *s = r == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
       : r == LAUNCH_FAILED ? "CUDA_ERROR_LAUNCH_FAILED"
       : r == NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return OK;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
    *s = r == OUT_OF_MEMORY ? "out of memory"
       : r == LAUNCH_FAILED ? "unspecified launch failure"
       : r == NO_DEVICE ? "no CUDA-capable device is detected" : "unknown error";
    return OK;
}
CUresult cuDeviceGetCount(int* n) { *n = MOCK_MODE == 1 ? 0 : 1; return OK; }
CUresult cuDeviceGet(int* d, int ordinal) {
    if (MOCK_MODE == 1 || ordinal != 0) return NO_DEVICE;
    *d = 0;
    return OK;
}
CUresult cuDeviceGetName(char* name, int len, int d) {
    (void)d;
    strncpy(name, "Mock GPU", (size_t)len);
    return OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
    (void)d;
    switch (attr) {
    case 1: *v = 1024; break;          /* max threads per block */
    case 8: *v = 49152; break;         /* shared memory per block */
    case 16: *v = 4; break;            /* multiprocessors */
    case 75: *v = 9; break;            /* compute capability */
    case 76: *v = 0; break;
    case 97: *v = 232448; break;
    default: *v = 0;
    }
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* b, int d) { (void)d; *b = (size_t)1 << 30; return OK; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { (void)d; *c = (void*)0x1000; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return OK; }
CUresult cuCtxSetCurrent(void* c) { (void)c; return OK; }
CUresult cuCtxSynchronize(void) {
    ++sync_count;
    if (MOCK_MODE == 3 && launched) return LAUNCH_FAILED;
    return OK;
}
CUresult cuMemGetInfo_v2(size_t* f, size_t* t) { *f = (size_t)1 << 29; *t = (size_t)1 << 30; return OK; }
CUresult cuModuleLoadDataEx(void** m, const void* image, unsigned n, int* o, void** v) {
    (void)image; (void)n; (void)o; (void)v;
    *m = (void*)0x2000;
    return OK;
}
CUresult cuModuleUnload(void* m) { (void)m; return OK; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    (void)m; (void)name;
    *f = (void*)0x3000;
    return OK;
}
CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
    (void)f;
    *v = attr == 0 ? 1024 : 0;
    return OK;
}
CUresult cuFuncSetAttribute(void* f, int attr, int v) {
    (void)f; (void)attr; (void)v;
    return OK;
}
CUresult cuMemAlloc_v2(uint64_t* p, size_t bytes) {
    if (MOCK_MODE == 2 && bytes > ((size_t)1 << 20)) return OUT_OF_MEMORY;
    void* h = malloc(bytes ? bytes : 1);
    if (!h) return OUT_OF_MEMORY;
    *p = (uint64_t)(uintptr_t)h;
    return OK;
}
CUresult cuMemFree_v2(uint64_t p) { free((void*)(uintptr_t)p); return OK; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void* h, size_t n) {
    memcpy((void*)(uintptr_t)d, h, n);
    ++htod_count;
    return OK;
}
CUresult cuMemcpyDtoH_v2(void* h, uint64_t d, size_t n) { memcpy(h, (void*)(uintptr_t)d, n); return OK; }
CUresult cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n) { memset((void*)(uintptr_t)d, v, n); return OK; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared;
    (void)extra;
    last_stream = (uint64_t)(uintptr_t)stream;
    for (int i = 0; i < record; ++i) memcpy(&last_params[i], params[i], sizeof(uint64_t));
    launched = 1;
    return OK;
}
CUresult cuEventCreate(void** e, unsigned flags) { (void)flags; *e = (void*)0x4000; return OK; }
CUresult cuEventRecord(void* e, void* s) { (void)e; (void)s; return OK; }
CUresult cuEventSynchronize(void* e) { (void)e; return OK; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) { (void)a; (void)b; *ms = 1.0f; return OK; }
CUresult cuEventDestroy_v2(void* e) { (void)e; return OK; }
/* Occupancy: a multiprocessor holds 227 KiB of shared memory and 2048 threads; clusters are
 * placed on 4 multiprocessors in groups of 3 (so that a cluster of 2 fits once a group, not
 * twice: fewer clusters than the multiprocessors divided by the cluster's blocks). The cluster
 * query checks the launch configuration as the driver lays it out. */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int threads, size_t dyn) {
    (void)f;
    int by_threads = threads > 0 ? 2048 / threads : 0;
    int by_shared = dyn > 0 ? (int)(232448 / dyn) : by_threads;
    *n = by_threads < by_shared ? by_threads : by_shared;
    return OK;
}
typedef struct {
    unsigned id;
    char pad[4];
    unsigned value[16];
} MockLaunchAttribute;
typedef struct {
    unsigned grid[3], block[3], shared;
    void* stream;
    MockLaunchAttribute* attrs;
    unsigned num_attrs;
} MockLaunchConfig;
CUresult cuOccupancyMaxActiveClusters(int* n, void* f, const MockLaunchConfig* c) {
    (void)f;
    if (c->num_attrs != 1 || c->attrs == NULL || c->attrs[0].id != 4) return 1;
    unsigned cx = c->attrs[0].value[0], cy = c->attrs[0].value[1], cz = c->attrs[0].value[2];
    if (cx == 0 || cy != 1 || cz != 1 || c->grid[0] != cx || c->stream != NULL) return 1;
    int per_sm = 0;
    cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, (int)(c->block[0] * c->block[1] * c->block[2]),
                                                c->shared);
    /* One group of 3 multiprocessors and one lone one: clusters fit within a group only. */
    *n = (int)((3 * (unsigned)per_sm) / cx + (unsigned)per_sm / cx);
    return OK;
}
/* A tensor map: encoded as zeros (the mock's kernels read nothing). */
CUresult cuTensorMapEncodeTiled(void* map, int dtype, unsigned rank, void* addr, const uint64_t* dims,
                                const uint64_t* strides, const unsigned* box, const unsigned* estrides,
                                int interleave, int swizzle, int l2, int oob) {
    (void)dtype; (void)rank; (void)addr; (void)dims; (void)strides; (void)box; (void)estrides;
    (void)interleave; (void)swizzle; (void)l2; (void)oob;
    memset(map, 0, 128);
    return OK;
}
