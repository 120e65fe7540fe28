/*
 * A stand-in libnvidia-ml.so.1 for tests: the NVML calls pynvml makes on gflow's paths,
 * answered from a JSON file named by $FAKE_NVML_FILE (re-read when it changes; checked on
 * every call). Build: gcc -shared -fPIC -O1 -o libnvidia-ml.so.1 fake_nvml.c
 *
 * File shape (every field optional except "gpus"):
 *   {"driver": "550.54.15", "initError": 0,
 *    "hangMs": 0,                                             // every system call first sleeps this long (a hung driver)
 *    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...",
 *              "memoryTotal": 85899345920, "memoryUsed": 0,   // default: sum of processes
 *              "utilization": 12,                             // null/absent: NOT_SUPPORTED
 *              "processes": [{"pid": 4242, "usedMemory": 2147483648,
 *                             "utilization": 40}],            // per-process SM %: nvmlDeviceGetProcessUtilization
 *              "lost": false,                                 // true: GPU_IS_LOST everywhere
 *              "error": 0,                                    // code every call on a handle fails with
 *              "transientErrors": 0, "transientCode": 999,    // the next N per-device calls fail
 *              "topology": [0, 10, 20, 50],                   // common-ancestor level to each GPU
 *              "minor": 3,                                    // nvmlDeviceGetMinorNumber; default: the index
 *              "numaNode": 1}],                               // its CPU affinity: that node's cores below
 *    "numaNodes": {"0": "0-15", "1": "16-31"}}                // cpulists; a GPU without both: NOT_SUPPORTED
 * No $FAKE_NVML_FILE, or a file that cannot be read/parsed before the first success:
 * nvmlInit returns NVML_ERROR_DRIVER_NOT_LOADED. A later bad file keeps the last good state.
 *
 * Extra export for tests: fakeNvmlStats(&inits, &shutdowns, &loads).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* _v2 and _v3 share this layout (24 bytes) */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* microseconds since the epoch */
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

/* ---------------------------------------------------------------- a tiny JSON reader */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jval {
    jtype t;
    long long i; /* numbers (integers exact), bools */
    char *s;
    int n;
    struct jval *items;
    char **keys;
} jval;

typedef struct { const char *p; int ok; } jparser;

static void jskip(jparser *jp) { while (isspace((unsigned char)*jp->p)) jp->p++; }

static void jfree(jval *v) {
    free(v->s);
    for (int k = 0; k < v->n; k++) {
        jfree(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

static void put_utf8(char **out, unsigned cp) {
    char *o = *out;
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | cp >> 6); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { *o++ = (char)(0xE0 | cp >> 12); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else { *o++ = (char)(0xF0 | cp >> 18); *o++ = (char)(0x80 | ((cp >> 12) & 0x3F)); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F)); }
    *out = o;
}

static int hex4(const char *p, unsigned *cp) {
    *cp = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = isdigit((unsigned char)c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *cp = *cp * 16 + (unsigned)d;
    }
    return 1;
}

static char *jstring(jparser *jp) {
    if (*jp->p != '"') { jp->ok = 0; return NULL; }
    const char *start = ++jp->p;
    size_t len = 0;
    while (start[len] && start[len] != '"') len += (start[len] == '\\' && start[len + 1]) ? 2 : 1;
    char *out = malloc(len * 2 + 1), *o = out; /* \uXXXX never grows beyond 2x */
    while (*jp->p && *jp->p != '"') {
        char c = *jp->p++;
        if (c != '\\') { *o++ = c; continue; }
        c = *jp->p++;
        switch (c) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            unsigned cp, lo;
            if (!hex4(jp->p, &cp)) { jp->ok = 0; break; }
            jp->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && jp->p[0] == '\\' && jp->p[1] == 'u' && hex4(jp->p + 2, &lo)) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                jp->p += 6;
            }
            put_utf8(&o, cp);
            break;
        }
        case '\0': jp->ok = 0; jp->p--; break;
        default: *o++ = c; /* \" \\ \/ */
        }
    }
    if (*jp->p != '"') jp->ok = 0; else jp->p++;
    *o = '\0';
    return out;
}

static void jvalue(jparser *jp, jval *v, int depth);

static void jappend(jval *v, jval *item, char *key) {
    v->items = realloc(v->items, (size_t)(v->n + 1) * sizeof *v->items);
    v->items[v->n] = *item;
    if (v->t == J_OBJ) {
        v->keys = realloc(v->keys, (size_t)(v->n + 1) * sizeof *v->keys);
        v->keys[v->n] = key;
    }
    v->n++;
}

static void jcontainer(jparser *jp, jval *v, int depth) {
    char close = v->t == J_OBJ ? '}' : ']';
    jp->p++;
    jskip(jp);
    if (*jp->p == close) { jp->p++; return; }
    while (jp->ok) {
        char *key = NULL;
        jval item = {0};
        jskip(jp);
        if (v->t == J_OBJ) {
            key = jstring(jp);
            jskip(jp);
            if (!jp->ok || *jp->p != ':') { jp->ok = 0; free(key); return; }
            jp->p++;
        }
        jvalue(jp, &item, depth + 1);
        jappend(v, &item, key);
        jskip(jp);
        if (*jp->p == ',') { jp->p++; continue; }
        if (*jp->p == close) { jp->p++; return; }
        jp->ok = 0;
    }
}

static void jvalue(jparser *jp, jval *v, int depth) {
    memset(v, 0, sizeof *v);
    jskip(jp);
    if (depth > 32) { jp->ok = 0; return; }
    const char *p = jp->p;
    if (*p == '{') { v->t = J_OBJ; jcontainer(jp, v, depth); }
    else if (*p == '[') { v->t = J_ARR; jcontainer(jp, v, depth); }
    else if (*p == '"') { v->t = J_STR; v->s = jstring(jp); }
    else if (!strncmp(p, "true", 4)) { v->t = J_BOOL; v->i = 1; jp->p += 4; }
    else if (!strncmp(p, "false", 5)) { v->t = J_BOOL; jp->p += 5; }
    else if (!strncmp(p, "null", 4)) { v->t = J_NULL; jp->p += 4; }
    else if (*p == '-' || isdigit((unsigned char)*p)) {
        char *end;
        v->t = J_NUM;
        /* unsigned when non-negative: 18446744073709551615 (NVML_VALUE_NOT_AVAILABLE) wraps to -1 */
        v->i = *p == '-' ? strtoll(p, &end, 10) : (long long)strtoull(p, &end, 10);
        if (*end == '.' || *end == 'e' || *end == 'E') v->i = (long long)strtod(p, &end);
        jp->p = end;
    } else jp->ok = 0;
}

static const jval *jget(const jval *obj, const char *key) {
    if (!obj || obj->t != J_OBJ) return NULL;
    for (int k = 0; k < obj->n; k++)
        if (!strcmp(obj->keys[k], key)) return &obj->items[k];
    return NULL;
}

static long long jint(const jval *obj, const char *key, long long dflt) {
    const jval *v = jget(obj, key);
    return v && (v->t == J_NUM || v->t == J_BOOL) ? v->i : dflt;
}

static void jcopy(char *dst, size_t size, const jval *obj, const char *key, const char *dflt) {
    const jval *v = jget(obj, key);
    snprintf(dst, size, "%s", v && v->t == J_STR ? v->s : dflt);
}

/* ---------------------------------------------------------------- the fake machine */

typedef struct { unsigned pid; unsigned long long used; long long util; /* < 0: no sample */ } fproc;

#define AFFINITY_WORDS 64 /* 4096 CPUs on 64-bit */
#define WORD_BITS (8 * (int)sizeof(unsigned long))

/* A cpulist like "0-3,8,10-11" into a bitmask; 0 if malformed. */
static int parse_cpulist(const char *text, unsigned long *mask) {
    const char *p = text;
    while (*p) {
        char *end;
        long low = strtol(p, &end, 10), high = low;
        if (end == p || low < 0) return 0;
        p = end;
        if (*p == '-') {
            high = strtol(p + 1, &end, 10);
            if (end == p + 1 || high < low) return 0;
            p = end;
        }
        for (long cpu = low; cpu <= high && cpu < AFFINITY_WORDS * WORD_BITS; cpu++)
            mask[cpu / WORD_BITS] |= 1UL << (cpu % WORD_BITS);
        if (*p == ',') p++;
        else if (*p) return 0;
    }
    return 1;
}

typedef struct {
    char name[96], uuid[96];
    unsigned long long mem_total, mem_used;
    long long util; /* < 0: not supported */
    int nproc;
    fproc *procs;
    int lost;  /* GPU_IS_LOST from every call, handle lookup included */
    int error; /* persistent error from every call taking a handle (the handle lookup works) */
    long long transient;
    int transient_code;
    int ntopo;
    int *topo;
    unsigned minor;
    int has_affinity;
    unsigned long affinity[AFFINITY_WORDS]; /* CPU bitmask, 64 (or 32) CPUs per word as NVML gives it */
    long long ecc_uncorrected; /* volatile uncorrectable (double-bit) ECC errors; < 0: not supported */
    long long pages_pending;   /* retired pages pending a reset (0/1); < 0: not supported */
    int nxid;
    long long *xids; /* Xid critical-error events, in order; each event set delivers each once */
    /* MIG: a GPU with "mig": [...] in the file has MIG mode on; its instances sit after the
       physical GPUs in the table (handles from nvmlDeviceGetMigDeviceHandleByIndex only) */
    int mig_mode, mig_first, nmig, max_mig;
    int is_mig, parent, gi, ci;
} fgpu;

#define MAX_HANDLES 256
typedef struct { int index; } handle_t; /* stable across reloads: handles outlive the table */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static handle_t handles[MAX_HANDLES];
static fgpu *gpus;
static int ngpus;
static int ntable; /* physical GPUs and the MIG instances after them */
static char driver[80] = "550.54.15";
static int init_error;
static long long hang_ms;
static int loaded; /* a file was parsed successfully at least once */
static int refcount;
static unsigned n_inits, n_shutdowns, n_loads;
static struct { long long mtime_ns, size, ino; } key = {-1, -1, -1};

static void free_gpus(fgpu *table, int n) {
    for (int k = 0; k < n; k++) { free(table[k].procs); free(table[k].topo); free(table[k].xids); }
    free(table);
}

/* ---------------------------------------------------------------- MIG (file side)
   "mig": [{"profile": "1g.10gb", "uuid": "MIG-...", "memoryTotal": N, "memoryUsed": N,
            "gpuInstanceId": G, "computeInstanceId": C, "processes": [{"pid", "usedMemory"}]}]
   makes the GPU MIG-enabled; "maxMigDevices" (default 7) is nvmlDeviceGetMaxMigDeviceCount. */
static void load_mig(fgpu *table, const jval *list) {
    int next = list->n;
    for (int k = 0; k < list->n; k++) {
        const jval *mig = jget(&list->items[k], "mig");
        fgpu *p = &table[k];
        if (!mig || mig->t != J_ARR) continue;
        p->mig_mode = 1;
        p->mig_first = next;
        p->nmig = mig->n;
        p->max_mig = (int)jint(&list->items[k], "maxMigDevices", 7);
        for (int m = 0; m < mig->n; m++, next++) {
            const jval *item = &mig->items[m];
            fgpu *t = &table[next];
            char profile[32], dflt[96];
            jcopy(profile, sizeof profile, item, "profile", "1g.10gb");
            snprintf(t->name, sizeof t->name, "%s MIG %s", p->name, profile);
            snprintf(dflt, sizeof dflt, "MIG-fa4e0000-0000-0000-%04d-%012d", k, m);
            jcopy(t->uuid, sizeof t->uuid, item, "uuid", dflt);
            t->mem_total = (unsigned long long)jint(item, "memoryTotal", 10737418240LL);
            const jval *procs = jget(item, "processes");
            unsigned long long sum = 0;
            if (procs && procs->t == J_ARR) {
                t->procs = calloc((size_t)procs->n + 1, sizeof *t->procs);
                for (int q = 0; q < procs->n; q++) {
                    t->procs[q].pid = (unsigned)jint(&procs->items[q], "pid", 0);
                    t->procs[q].used = (unsigned long long)jint(&procs->items[q], "usedMemory", 0);
                    t->procs[q].util = -1;
                    sum += t->procs[q].used;
                }
                t->nproc = procs->n;
            }
            t->mem_used = (unsigned long long)jint(item, "memoryUsed", (long long)sum);
            t->util = -1; /* NVML has no utilization for a MIG device */
            t->minor = p->minor;
            t->is_mig = 1;
            t->parent = k;
            t->gi = (int)jint(item, "gpuInstanceId", m + 1);
            t->ci = (int)jint(item, "computeInstanceId", 0);
        }
    }
}

static int load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) text = realloc(text, cap *= 2);
    }
    fclose(f);
    text[len] = '\0';
    jparser jp = {text, 1};
    jval root;
    jvalue(&jp, &root, 0);
    jskip(&jp);
    const jval *list = jget(&root, "gpus");
    if (!jp.ok || *jp.p || root.t != J_OBJ || !list || list->t != J_ARR) {
        fprintf(stderr, "fake NVML: %s is not a valid fake-NVML JSON document\n", path);
        jfree(&root);
        free(text);
        return 0;
    }
    int total = list->n;
    for (int k = 0; k < list->n; k++) {
        const jval *mig = jget(&list->items[k], "mig");
        if (mig && mig->t == J_ARR) total += mig->n;
    }
    fgpu *table = calloc((size_t)total + 1, sizeof *table);
    for (int k = 0; k < list->n; k++) {
        const jval *g = &list->items[k];
        fgpu *t = &table[k];
        char dflt[96];
        snprintf(dflt, sizeof dflt, "GPU-fa4e0000-0000-0000-0000-%012d", k);
        jcopy(t->name, sizeof t->name, g, "name", "NVIDIA Fake GPU");
        jcopy(t->uuid, sizeof t->uuid, g, "uuid", dflt);
        t->mem_total = (unsigned long long)jint(g, "memoryTotal", 17179869184LL);
        t->util = jint(g, "utilization", -1);
        t->lost = jint(g, "lost", 0) != 0;
        t->error = t->lost ? NVML_ERROR_GPU_IS_LOST : (int)jint(g, "error", 0);
        t->transient = jint(g, "transientErrors", 0);
        t->transient_code = (int)jint(g, "transientCode", NVML_ERROR_UNKNOWN);
        const jval *procs = jget(g, "processes");
        unsigned long long sum = 0;
        if (procs && procs->t == J_ARR) {
            t->procs = calloc((size_t)procs->n + 1, sizeof *t->procs);
            for (int m = 0; m < procs->n; m++) {
                t->procs[m].pid = (unsigned)jint(&procs->items[m], "pid", 0);
                t->procs[m].used = (unsigned long long)jint(&procs->items[m], "usedMemory", 0);
                t->procs[m].util = jint(&procs->items[m], "utilization", -1);
                sum += t->procs[m].used;
            }
            t->nproc = procs->n;
        }
        t->mem_used = (unsigned long long)jint(g, "memoryUsed", (long long)sum);
        const jval *topo = jget(g, "topology");
        if (topo && topo->t == J_ARR) {
            t->topo = calloc((size_t)topo->n + 1, sizeof *t->topo);
            for (int m = 0; m < topo->n; m++) t->topo[m] = (int)topo->items[m].i;
            t->ntopo = topo->n;
        }
        t->ecc_uncorrected = jint(g, "eccUncorrected", 0);
        t->pages_pending = jint(g, "retiredPagesPending", 0);
        const jval *xids = jget(g, "xids");
        if (xids && xids->t == J_ARR) {
            t->xids = calloc((size_t)xids->n + 1, sizeof *t->xids);
            for (int m = 0; m < xids->n; m++) t->xids[m] = xids->items[m].i;
            t->nxid = xids->n;
        }
        t->minor = (unsigned)jint(g, "minor", k);
        long long numa = jint(g, "numaNode", -1);
        if (numa >= 0) {
            char name[24];
            snprintf(name, sizeof name, "%lld", numa);
            const jval *cpus = jget(jget(&root, "numaNodes"), name);
            t->has_affinity = cpus && cpus->t == J_STR && parse_cpulist(cpus->s, t->affinity);
        }
    }
    load_mig(table, list);
    free_gpus(gpus, ntable);
    gpus = table;
    ngpus = list->n < MAX_HANDLES ? list->n : MAX_HANDLES;
    ntable = total < MAX_HANDLES ? total : MAX_HANDLES;
    jcopy(driver, sizeof driver, &root, "driver", "550.54.15");
    init_error = (int)jint(&root, "initError", 0);
    hang_ms = jint(&root, "hangMs", 0);
    loaded = 1;
    n_loads++;
    jfree(&root);
    free(text);
    return 1;
}

/* Re-read the file when its (mtime, size, inode) changed. Caller holds mu. */
static void refresh(void) {
    const char *path = getenv("FAKE_NVML_FILE");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    long long mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (mtime == key.mtime_ns && (long long)st.st_size == key.size && (long long)st.st_ino == key.ino) return;
    if (load(path)) { key.mtime_ns = mtime; key.size = (long long)st.st_size; key.ino = (long long)st.st_ino; }
}

/* Every device call starts here: initialized? handle valid? GPU failing? Holds mu on success. */
static nvmlReturn_t enter(void *device, fgpu **out) {
    pthread_mutex_lock(&mu);
    if (refcount == 0) { pthread_mutex_unlock(&mu); return NVML_ERROR_UNINITIALIZED; }
    refresh();
    handle_t *h = device;
    if (!h || h < handles || h >= handles + MAX_HANDLES || h->index >= ntable) {
        pthread_mutex_unlock(&mu);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    fgpu *g = &gpus[h->index];
    int rc = g->error;
    if (!rc && g->transient > 0) { g->transient--; rc = g->transient_code; }
    if (rc) { pthread_mutex_unlock(&mu); return rc; }
    *out = g;
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t rc) { pthread_mutex_unlock(&mu); return rc; }

static nvmlReturn_t enter_system(void) {
    pthread_mutex_lock(&mu);
    if (refcount == 0) { pthread_mutex_unlock(&mu); return NVML_ERROR_UNINITIALIZED; }
    refresh();
    if (hang_ms > 0) { /* a hung driver call; the lock is not held while it hangs */
        long long ms = hang_ms;
        pthread_mutex_unlock(&mu);
        usleep((useconds_t)(ms > 3600000 ? 3600000 : ms) * 1000);
        pthread_mutex_lock(&mu);
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- the API */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    refresh();
    nvmlReturn_t rc = !loaded ? NVML_ERROR_DRIVER_NOT_LOADED : init_error;
    if (rc == NVML_SUCCESS) { refcount++; n_inits++; }
    return leave(rc);
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    if (refcount == 0) return leave(NVML_ERROR_UNINITIALIZED);
    refcount--;
    n_shutdowns++;
    return leave(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = enter_system();
    return rc ? rc : leave(copy_string(version, length, driver));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = enter_system();
    if (rc) return rc;
    char text[96];
    snprintf(text, sizeof text, "12.%s", driver);
    return leave(copy_string(version, length, text));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    nvmlReturn_t rc = enter_system();
    if (rc) return rc;
    if (!version) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *version = 12040;
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t rc = enter_system();
    if (rc) return rc;
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = (unsigned)ngpus;
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    nvmlReturn_t rc = enter_system();
    if (rc) return rc;
    if (!device || index >= (unsigned)ngpus) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpus[index].lost) return leave(NVML_ERROR_GPU_IS_LOST); /* a lost GPU has no handle */
    handles[index].index = (int)index;
    *device = &handles[index];
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(void *device, unsigned int *index) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    *index = (unsigned)(g - gpus);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    return rc ? rc : leave(copy_string(name, length, g->name));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    return rc ? rc : leave(copy_string(uuid, length, g->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(void *device, nvmlMemory_t *memory) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!memory) return leave(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = g->mem_total;
    memory->used = g->mem_used;
    memory->free = g->mem_total > g->mem_used ? g->mem_total - g->mem_used : 0;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *device, nvmlMemory_v2_t *memory) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!memory) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != NVML_MEMORY_V2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory->total = g->mem_total;
    memory->reserved = 0;
    memory->used = g->mem_used;
    memory->free = g->mem_total > g->mem_used ? g->mem_total - g->mem_used : 0;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(void *device, nvmlUtilization_t *utilization) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!utilization) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->util < 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    utilization->gpu = (unsigned)g->util;
    utilization->memory = g->mem_total ? (unsigned)(100.0 * (double)g->mem_used / (double)g->mem_total) : 0;
    return leave(NVML_SUCCESS);
}

/* The two-call size protocol: too small a buffer (or NULL) -> INSUFFICIENT_SIZE with the count. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!infoCount) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned have = *infoCount;
    *infoCount = (unsigned)g->nproc;
    if (g->nproc == 0) return leave(NVML_SUCCESS);
    if (!infos || have < (unsigned)g->nproc) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    for (int k = 0; k < g->nproc; k++) {
        infos[k].pid = g->procs[k].pid;
        infos[k].usedGpuMemory = g->procs[k].used;
        infos[k].gpuInstanceId = 0xFFFFFFFFu;
        infos[k].computeInstanceId = 0xFFFFFFFFu;
    }
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

/* Per-process utilization samples newer than lastSeenTimeStamp (us): one per process that has a
 * "utilization", stamped now. None: NOT_FOUND, as the real driver answers. Same size protocol. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(void *device, nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!processSamplesCount) return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long stamp = (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000ULL;
    unsigned n = 0;
    for (int k = 0; k < g->nproc; k++) n += g->procs[k].util >= 0;
    if (n == 0 || stamp <= lastSeenTimeStamp) return leave(NVML_ERROR_NOT_FOUND);
    unsigned have = *processSamplesCount;
    *processSamplesCount = n;
    if (!utilization || have < n) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    unsigned m = 0;
    for (int k = 0; k < g->nproc; k++) {
        if (g->procs[k].util < 0) continue;
        utilization[m].pid = g->procs[k].pid;
        utilization[m].timeStamp = stamp;
        utilization[m].smUtil = (unsigned)g->procs[k].util;
        utilization[m].memUtil = utilization[m].encUtil = utilization[m].decUtil = 0;
        m++;
    }
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *device1, void *device2, int *pathInfo) {
    fgpu *a, *b;
    nvmlReturn_t rc = enter(device1, &a);
    if (rc) return rc;
    int i = (int)(a - gpus);
    leave(NVML_SUCCESS);
    rc = enter(device2, &b); /* may reload the table: look the first GPU up again */
    if (rc) return rc;
    if (!pathInfo || i >= ngpus) return leave(NVML_ERROR_INVALID_ARGUMENT);
    a = &gpus[i];
    int j = (int)(b - gpus);
    if (!a->topo || j >= a->ntopo) return leave(NVML_ERROR_NOT_SUPPORTED);
    *pathInfo = a->topo[j];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(void *device, unsigned int *minorNumber) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!minorNumber) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *minorNumber = g->minor;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(void *device, unsigned int cpuSetSize, unsigned long *cpuSet) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!cpuSet || cpuSetSize == 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->has_affinity) return leave(NVML_ERROR_NOT_SUPPORTED);
    for (unsigned k = 0; k < cpuSetSize; k++) cpuSet[k] = k < AFFINITY_WORDS ? g->affinity[k] : 0;
    return leave(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- health: ECC, retired pages, Xid events */

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *device, int errorType, int counterType, unsigned long long *count) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->ecc_uncorrected < 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    (void)counterType;
    *count = errorType == 1 ? (unsigned long long)g->ecc_uncorrected : 0; /* 1: NVML_MEMORY_ERROR_TYPE_UNCORRECTED */
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void *device, int *isPending) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!isPending) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->pages_pending < 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    *isPending = g->pages_pending ? 1 : 0;
    return leave(NVML_SUCCESS);
}

typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} fevent;

typedef struct { int registered[MAX_HANDLES]; int delivered[MAX_HANDLES]; } fset;

#define XID_CRITICAL 0x8ULL /* nvmlEventTypeXidCriticalError */

EXPORT nvmlReturn_t nvmlEventSetCreate(void **set) {
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(fset));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(void *device, unsigned long long eventTypes, void *set) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!set || (eventTypes & ~XID_CRITICAL)) return leave(NVML_ERROR_NOT_SUPPORTED);
    fset *s = set;
    int index = (int)(g - gpus);
    s->registered[index] = 1;
    s->delivered[index] = g->nxid; /* events from now on, as the driver does */
    return leave(NVML_SUCCESS);
}

/* Never blocks: the next undelivered Xid of a registered GPU, or NVML_ERROR_TIMEOUT. */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(void *set, fevent *data, unsigned int timeoutms) {
    (void)timeoutms;
    nvmlReturn_t rc = enter_system();
    if (rc) return rc;
    if (!set || !data) return leave(NVML_ERROR_INVALID_ARGUMENT);
    fset *s = set;
    for (int k = 0; k < ngpus; k++) {
        if (!s->registered[k] || s->delivered[k] >= gpus[k].nxid) continue;
        handles[k].index = k;
        memset(data, 0, sizeof *data);
        data->device = &handles[k];
        data->eventType = XID_CRITICAL;
        data->eventData = (unsigned long long)gpus[k].xids[s->delivered[k]++];
        return leave(NVML_SUCCESS);
    }
    return leave(NVML_ERROR_TIMEOUT);
}
EXPORT nvmlReturn_t nvmlEventSetWait(void *set, fevent *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetFree(void *set) {
    free(set);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- MIG (the API) */

#define NVML_DEVICE_MIG_ENABLE 1

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(void *device, unsigned int *currentMode, unsigned int *pendingMode) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!currentMode || !pendingMode) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->is_mig) return leave(NVML_ERROR_NOT_SUPPORTED);
    *currentMode = *pendingMode = g->mig_mode ? NVML_DEVICE_MIG_ENABLE : 0;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *device, unsigned int *count) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = g->mig_mode ? (unsigned)g->max_mig : 0;
    return leave(NVML_SUCCESS);
}

/* slots past the instances made are empty: NOT_FOUND, as the driver answers */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *device, unsigned int index, void **migDevice) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!migDevice || !g->mig_mode || g->is_mig) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= (unsigned)g->nmig) return leave(NVML_ERROR_NOT_FOUND);
    int at = g->mig_first + (int)index;
    if (at >= MAX_HANDLES) return leave(NVML_ERROR_NOT_FOUND);
    handles[at].index = at;
    *migDevice = &handles[at];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *device, unsigned int *isMigDevice) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!isMigDevice) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = (unsigned)g->is_mig;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *device, unsigned int *id) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!id || !g->is_mig) return leave(NVML_ERROR_NOT_SUPPORTED);
    *id = (unsigned)g->gi;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *device, unsigned int *id) {
    fgpu *g;
    nvmlReturn_t rc = enter(device, &g);
    if (rc) return rc;
    if (!id || !g->is_mig) return leave(NVML_ERROR_NOT_SUPPORTED);
    *id = (unsigned)g->ci;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *migDevice, void **device) {
    fgpu *g;
    nvmlReturn_t rc = enter(migDevice, &g);
    if (rc) return rc;
    if (!device || !g->is_mig) return leave(NVML_ERROR_INVALID_ARGUMENT);
    handles[g->parent].index = g->parent;
    *device = &handles[g->parent];
    return leave(NVML_SUCCESS);
}

EXPORT void fakeNvmlStats(unsigned *inits, unsigned *shutdowns, unsigned *loads) {
    pthread_mutex_lock(&mu);
    *inits = n_inits;
    *shutdowns = n_shutdowns;
    *loads = n_loads;
    pthread_mutex_unlock(&mu);
}
