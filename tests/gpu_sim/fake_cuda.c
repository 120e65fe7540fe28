/*
 * A stand-in libcuda.so.1 for testing hack/gpu_probe.py and hack/gpu-acceptance.py on machines
 * without a GPU: the CUDA driver API calls the probe makes, with the real C signatures.
 * Build: gcc -shared -fPIC -O1 -o libcuda.so.1 fake_cuda.c
 *
 * $FAKE_CUDA_GPUS  the machine's GPUs in PCI order, ';'-separated "BUSID|NAME|TOTALBYTES",
 *                  e.g. "0000:3B:00.0|NVIDIA H100 80GB HBM3|85520809984;0000:5E:00.0|...".
 *                  Unset or empty: no GPU (cuInit returns CUDA_ERROR_NO_DEVICE).
 * CUDA_VISIBLE_DEVICES  honoured like the driver: unset = all; a list of indices, stopping at
 *                  the first invalid one; empty = none.
 * $FAKE_CUDA_STATE a directory: after every change the process writes <dir>/<pid> (atomically),
 *                  one line per GPU it holds: "<physical index> <bytes> <last busy, epoch ms>".
 *                  The test's stand-in driver turns these into what NVML and nvidia-smi report.
 * A context costs CONTEXT_BYTES of device memory, as a real one costs a few hundred MiB.
 * cuMemsetD8_v2 sleeps 1 ms per call (the GPU's time), so a busy loop does not spin a CPU.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPUS 16
#define MAX_CTX 64
#define MAX_ALLOC 4096
#define CONTEXT_BYTES (256ULL << 20)

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;

enum {
    CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
};

typedef struct { char bus[32]; char name[96]; unsigned long long total; } gpu_t;
typedef struct { int used; int phys; unsigned long long bytes; long long busy_ms; } ctx_t;
typedef struct { CUdeviceptr ptr; unsigned long long size; int ctx; } alloc_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static gpu_t gpus[MAX_GPUS];
static int ngpus, initialized;
static int visible[MAX_GPUS], nvisible; /* ordinal -> physical index */
static ctx_t ctxs[MAX_CTX];
static alloc_t allocs[MAX_ALLOC];
static __thread int current = -1; /* index into ctxs, per thread like the real driver */
static CUdeviceptr next_ptr = 0x700000000000ULL;
static long long last_write_ms;

static long long now_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void parse_gpus(void) {
    const char *spec = getenv("FAKE_CUDA_GPUS");
    ngpus = 0;
    if (!spec) return;
    char *copy = strdup(spec), *save = NULL;
    for (char *item = strtok_r(copy, ";", &save); item && ngpus < MAX_GPUS; item = strtok_r(NULL, ";", &save)) {
        char *bar1 = strchr(item, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
        if (!bar1 || !bar2) continue;
        *bar1 = *bar2 = '\0';
        gpu_t *g = &gpus[ngpus++];
        snprintf(g->bus, sizeof g->bus, "%s", item);
        snprintf(g->name, sizeof g->name, "%s", bar1 + 1);
        g->total = strtoull(bar2 + 1, NULL, 10);
    }
    free(copy);
}

static void parse_visible(void) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    nvisible = 0;
    if (!cvd) {
        for (int i = 0; i < ngpus; i++) visible[nvisible++] = i;
        return;
    }
    char *copy = strdup(cvd), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && nvisible < MAX_GPUS; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long index = strtol(tok, &end, 10);
        if (end == tok || *end || index < 0 || index >= ngpus) break; /* the driver stops at the first invalid entry */
        visible[nvisible++] = (int)index;
    }
    free(copy);
}

/* Publish what this process holds. Caller holds mu. */
static void write_state(int force) {
    const char *dir = getenv("FAKE_CUDA_STATE");
    if (!dir) return;
    long long now = now_ms();
    if (!force && now - last_write_ms < 200) return;
    last_write_ms = now;
    unsigned long long bytes[MAX_GPUS] = {0};
    long long busy[MAX_GPUS] = {0};
    int held[MAX_GPUS] = {0};
    for (int c = 0; c < MAX_CTX; c++) {
        if (!ctxs[c].used) continue;
        held[ctxs[c].phys] = 1;
        bytes[ctxs[c].phys] += ctxs[c].bytes;
        if (ctxs[c].busy_ms > busy[ctxs[c].phys]) busy[ctxs[c].phys] = ctxs[c].busy_ms;
    }
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
    snprintf(tmp, sizeof tmp, "%s/.%d.tmp", dir, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    for (int i = 0; i < ngpus; i++)
        if (held[i]) fprintf(f, "%d %llu %lld\n", i, bytes[i], busy[i]);
    fclose(f);
    rename(tmp, path);
}

EXPORT CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (!initialized) {
        parse_gpus();
        parse_visible();
        initialized = 1;
    }
    int n = nvisible;
    pthread_mutex_unlock(&mu);
    return n ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = nvisible;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= nvisible) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static int valid(CUdevice dev) { return initialized && dev >= 0 && dev < nvisible; }

EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    if (!valid(dev)) return initialized ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "%s", gpus[visible[dev]].bus);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!valid(dev)) return initialized ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", gpus[visible[dev]].name);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    if (!valid(dev)) return initialized ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)gpus[visible[dev]].total;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    if (!valid(dev)) return initialized ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int c = 0;
    while (c < MAX_CTX && ctxs[c].used) c++;
    if (c == MAX_CTX) { pthread_mutex_unlock(&mu); return CUDA_ERROR_OUT_OF_MEMORY; }
    ctxs[c] = (ctx_t){1, visible[dev], CONTEXT_BYTES, 0};
    current = c;
    write_state(1);
    pthread_mutex_unlock(&mu);
    *pctx = (CUcontext)(intptr_t)(c + 1);
    return CUDA_SUCCESS;
}

static int ctx_index(CUcontext ctx) {
    intptr_t c = (intptr_t)ctx - 1;
    return (c >= 0 && c < MAX_CTX && ctxs[c].used) ? (int)c : -1;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (ctx == NULL) { current = -1; return CUDA_SUCCESS; }
    int c = ctx_index(ctx);
    if (c < 0) return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
    return current >= 0 && ctxs[current].used ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    pthread_mutex_lock(&mu);
    int c = ctx_index(ctx);
    if (c < 0) { pthread_mutex_unlock(&mu); return CUDA_ERROR_INVALID_CONTEXT; }
    for (int a = 0; a < MAX_ALLOC; a++)
        if (allocs[a].ptr && allocs[a].ctx == c) allocs[a].ptr = 0;
    ctxs[c].used = 0;
    if (current == c) current = -1;
    write_state(1);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (current < 0) { pthread_mutex_unlock(&mu); return CUDA_ERROR_INVALID_CONTEXT; }
    unsigned long long used = 0;
    for (int c = 0; c < MAX_CTX; c++)
        if (ctxs[c].used && ctxs[c].phys == ctxs[current].phys) used += ctxs[c].bytes;
    int a = 0;
    while (a < MAX_ALLOC && allocs[a].ptr) a++;
    if (a == MAX_ALLOC || used + bytesize > gpus[ctxs[current].phys].total) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    allocs[a] = (alloc_t){next_ptr, bytesize, current};
    next_ptr += (bytesize + 0xFFFFF) & ~0xFFFFFULL;
    ctxs[current].bytes += bytesize;
    *dptr = allocs[a].ptr;
    write_state(1);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    pthread_mutex_lock(&mu);
    for (int a = 0; a < MAX_ALLOC; a++) {
        if (allocs[a].ptr == dptr && dptr) {
            ctxs[allocs[a].ctx].bytes -= allocs[a].size;
            allocs[a].ptr = 0;
            write_state(1);
            pthread_mutex_unlock(&mu);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n) {
    (void)uc;
    pthread_mutex_lock(&mu);
    int ok = 0;
    for (int a = 0; a < MAX_ALLOC; a++)
        if (allocs[a].ptr && dst >= allocs[a].ptr && dst + n <= allocs[a].ptr + allocs[a].size) ok = 1;
    if (ok && current >= 0) {
        ctxs[current].busy_ms = now_ms();
        write_state(0);
    }
    pthread_mutex_unlock(&mu);
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    struct timespec gpu_time = {0, 1000000};
    nanosleep(&gpu_time, NULL);
    return CUDA_SUCCESS;
}

/* the driver's descriptions (cuGetErrorString), as CUDA's documentation gives them */
EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "initialization error"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "invalid device context"; break;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "CUDA_ERROR_INVALID_CONTEXT"; break;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
