/*
 * libascendcl.so of kitchen's CANN ABI simulator: the runtime (init, devices,
 * contexts, streams, memory, copies, error messages) and all of the
 * simulator's state, including the handles that libnnopbase.so creates and
 * the executors that libopapi.so queues. See README.md.
 *
 * "Device" memory is host memory behind opaque addresses that are never
 * valid host pointers. Operators run when their stream is synchronized, so
 * a caller that reads results before aclrtSynchronizeStream, or frees memory
 * that a queued operator uses, gets stale data or an error, as on hardware.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann.h"

#define MAGIC_TENSOR 0x54454e53u
#define MAGIC_SCALAR 0x5343414cu
#define MAGIC_INTARR 0x494e5441u
#define MAGIC_EXEC 0x45584543u
#define MAGIC_STREAM 0x5354524du
#define MAGIC_CTX 0x43545854u
#define MAX_DEVICES 8

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- error messages and fault injection ---- */

static __thread char tls_msg[1024];
static __thread char tls_out[1024];
static __thread int tls_has_msg;

KSIM_API void ksim_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    tls_has_msg = 1;
}

/* aclGetRecentErrMsg returns the message of this thread's most recent
 * failure and forgets it; NULL when there is none. */
KSIM_API const char *aclGetRecentErrMsg(void) {
    if (!tls_has_msg) {
        return NULL;
    }
    memcpy(tls_out, tls_msg, sizeof tls_out);
    tls_has_msg = 0;
    return tls_out;
}

/* KITCHEN_SIM_FAIL="name:code:message[;name:code:message...]" makes each
 * named call fail with that code, and aclGetRecentErrMsg return the message.
 * It is read at every call. */
KSIM_API bool ksim_fail(const char *name, int *code) {
    const char *spec = getenv("KITCHEN_SIM_FAIL");
    if (spec == NULL || *spec == 0) {
        return false;
    }
    size_t n = strlen(name);
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > n && strncmp(p, name, n) == 0 && p[n] == ':') {
            char buf[1024];
            size_t rest = len - n - 1;
            if (rest >= sizeof buf) {
                rest = sizeof buf - 1;
            }
            memcpy(buf, p + n + 1, rest);
            buf[rest] = 0;
            char *colon = strchr(buf, ':');
            *code = (int)strtol(buf, NULL, 10);
            ksim_set_error("%s", colon ? colon + 1 : "injected failure");
            return true;
        }
        if (!end) {
            break;
        }
        p = end + 1;
    }
    return false;
}

#define FAIL_POINT(name)                                                                                              \
    do {                                                                                                              \
        int code_;                                                                                                    \
        if (ksim_fail(name, &code_)) {                                                                                \
            return code_;                                                                                             \
        }                                                                                                             \
    } while (0)

/* ---- statistics ---- */

/* kitchenSimStats mirrors ascendsim.Stats in Go, field for field. */
typedef struct kitchenSimStats {
    int64_t h2dCopies, h2dBytes;
    int64_t d2hCopies, d2hBytes;
    int64_t d2dCopies, d2dBytes;
    int64_t liveAllocs, liveBytes, totalAllocs;
    int64_t liveTensors, liveScalars, liveIntArrays, liveExecutors;
    int64_t launches, syncs, pendingTasks;
    int64_t deviceRefs; /* aclrtSetDevice calls not yet undone by aclrtResetDevice */
    int64_t initCalls;  /* aclInit calls, failed and repeated ones included */
    int64_t finalizeCalls; /* aclFinalize calls, failed ones included */
} kitchenSimStats;

static kitchenSimStats stats;

#define MAX_OPS 128
static struct {
    char name[64];
    int64_t count;
} opcount[MAX_OPS];
static int nops;

/* kitchenSimGetStats copies the counters. Only tests call it. */
KSIM_API void kitchenSimGetStats(kitchenSimStats *out) {
    pthread_mutex_lock(&mu);
    *out = stats;
    pthread_mutex_unlock(&mu);
}

/* kitchenSimOpCount returns how many times the named aclnn operator was
 * launched (second phase called successfully). Only tests call it. */
KSIM_API int64_t kitchenSimOpCount(const char *op) {
    int64_t n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nops; i++) {
        if (strcmp(opcount[i].name, op) == 0) {
            n = opcount[i].count;
        }
    }
    pthread_mutex_unlock(&mu);
    return n;
}

static void count_op(const char *op) {
    for (int i = 0; i < nops; i++) {
        if (strcmp(opcount[i].name, op) == 0) {
            opcount[i].count++;
            return;
        }
    }
    if (nops < MAX_OPS) {
        snprintf(opcount[nops].name, sizeof opcount[nops].name, "%s", op);
        opcount[nops].count = 1;
        nops++;
    }
}

/* ---- handle registries ---- */

typedef struct {
    void **items;
    size_t n, cap;
} set;

static void set_add(set *s, void *p) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->items = realloc(s->items, s->cap * sizeof *s->items);
    }
    s->items[s->n++] = p;
}

static bool set_has(const set *s, const void *p) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->items[i] == p) {
            return true;
        }
    }
    return false;
}

static bool set_remove(set *s, const void *p) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->items[i] == p) {
            s->items[i] = s->items[--s->n];
            return true;
        }
    }
    return false;
}

static set tensors, scalars, intarrays, execs, streams;

/* ---- behaviour knobs ---- */

KSIM_API bool ksim_minmax_ignores_nan(void) {
    const char *v = getenv("KITCHEN_SIM_MINMAX_NAN");
    return v != NULL && strcmp(v, "ignore") == 0;
}

KSIM_API int64_t ksim_nan_to_int(void) {
    const char *v = getenv("KITCHEN_SIM_NAN_TO_INT");
    return v == NULL ? 0 : strtoll(v, NULL, 10);
}

/* ---- devices and contexts ---- */

typedef struct {
    uint32_t magic;
    int device;
} context;

static context contexts[MAX_DEVICES];
static int initialized;
static int finalized; /* aclFinalize has run: aclInit is refused */
static __thread context *tls_ctx;

/* Each device's floating-point overflow mode (aclrtFloatOverflowMode).
 * KITCHEN_SIM_SAT_MODE=N sets every device's mode to N whenever the variable
 * takes a new value (unset: ACL_RT_OVERFLOW_MODE_INFNAN, the Atlas A2
 * default); aclrtSetDeviceSatMode changes it after that. The caller holds
 * mu. */
static aclrtFloatOverflowMode satmode[MAX_DEVICES];
static char satmode_spec[32] = "\x01"; /* never a value: the first call applies the variable */

static void satmode_refresh(void) {
    const char *v = getenv("KITCHEN_SIM_SAT_MODE");
    if (v == NULL) {
        v = "";
    }
    if (strncmp(v, satmode_spec, sizeof satmode_spec) == 0) {
        return;
    }
    snprintf(satmode_spec, sizeof satmode_spec, "%s", v);
    int mode = *v ? atoi(v) : ACL_RT_OVERFLOW_MODE_INFNAN;
    for (int i = 0; i < MAX_DEVICES; i++) {
        satmode[i] = mode;
    }
}

static int device_count(void) {
    const char *v = getenv("KITCHEN_SIM_DEVICES");
    if (v == NULL || *v == 0) {
        return 1;
    }
    int n = atoi(v);
    if (n < 0) {
        n = 0;
    }
    return n > MAX_DEVICES ? MAX_DEVICES : n;
}

KSIM_API aclError aclInit(const char *configPath) {
    (void)configPath;
    pthread_mutex_lock(&mu);
    stats.initCalls++;
    pthread_mutex_unlock(&mu);
    FAIL_POINT("aclInit");
    pthread_mutex_lock(&mu);
    int again = initialized, over = finalized;
    if (!over) {
        initialized = 1;
    }
    pthread_mutex_unlock(&mu);
    if (over) {
        /* acl.h: aclInit can be called once per process, and after
         * aclFinalize the services cannot be used. */
        ksim_set_error("aclInit: AscendCL was finalized in this process and cannot be initialized again");
        return ACL_ERROR_REPEAT_INITIALIZE;
    }
    if (again) {
        ksim_set_error("aclInit: already initialized in this process");
        return ACL_ERROR_REPEAT_INITIALIZE;
    }
    return ACL_SUCCESS;
}

/* aclFinalize ends AscendCL for the process (acl.h asks for it before the
 * process exits; after it the services cannot be used): every later runtime
 * call fails with ACL_ERROR_UNINITIALIZE, and aclInit cannot start it again.
 * Devices still set are left as they are, so that the counters show whether
 * the caller reset them. Every call is counted, failed ones included. */
KSIM_API aclError aclFinalize(void) {
    pthread_mutex_lock(&mu);
    stats.finalizeCalls++;
    pthread_mutex_unlock(&mu);
    FAIL_POINT("aclFinalize");
    pthread_mutex_lock(&mu);
    int ok = initialized;
    initialized = 0;
    finalized = finalized || ok;
    pthread_mutex_unlock(&mu);
    if (!ok) {
        ksim_set_error("aclFinalize: AscendCL is not initialized (aclInit not called, or already finalized)");
        return ACL_ERROR_UNINITIALIZE;
    }
    return ACL_SUCCESS;
}

static aclError need_init(const char *call) {
    pthread_mutex_lock(&mu);
    int ok = initialized;
    pthread_mutex_unlock(&mu);
    if (!ok) {
        ksim_set_error("%s: aclInit has not been called", call);
        return ACL_ERROR_UNINITIALIZE;
    }
    return ACL_SUCCESS;
}

/* need_ctx fails, as the runtime does, when the calling thread has no current
 * context: every thread must call aclrtSetDevice or aclrtSetCurrentContext. */
static aclError need_ctx(const char *call) {
    aclError e = need_init(call);
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (tls_ctx == NULL) {
        ksim_set_error("%s: this thread has no current context (call aclrtSetCurrentContext)", call);
        return ACL_ERROR_RT_CONTEXT_NULL;
    }
    return ACL_SUCCESS;
}

KSIM_API aclError aclrtGetDeviceCount(uint32_t *count) {
    FAIL_POINT("aclrtGetDeviceCount");
    aclError e = need_init("aclrtGetDeviceCount");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (count == NULL) {
        ksim_set_error("aclrtGetDeviceCount: count is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    *count = (uint32_t)device_count();
    return ACL_SUCCESS;
}

KSIM_API aclError aclrtSetDevice(int32_t deviceId) {
    FAIL_POINT("aclrtSetDevice");
    aclError e = need_init("aclrtSetDevice");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (deviceId < 0 || deviceId >= device_count()) {
        ksim_set_error("aclrtSetDevice: device %d does not exist (%d devices)", deviceId, device_count());
        return ACL_ERROR_RT_INVALID_DEVICEID;
    }
    pthread_mutex_lock(&mu);
    contexts[deviceId].magic = MAGIC_CTX;
    contexts[deviceId].device = deviceId;
    stats.deviceRefs++;
    pthread_mutex_unlock(&mu);
    tls_ctx = &contexts[deviceId];
    return ACL_SUCCESS;
}

KSIM_API aclError aclrtResetDevice(int32_t deviceId) {
    FAIL_POINT("aclrtResetDevice");
    aclError e = need_init("aclrtResetDevice");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (deviceId < 0 || deviceId >= device_count()) {
        ksim_set_error("aclrtResetDevice: device %d does not exist (%d devices)", deviceId, device_count());
        return ACL_ERROR_RT_INVALID_DEVICEID;
    }
    pthread_mutex_lock(&mu);
    if (stats.deviceRefs > 0) {
        stats.deviceRefs--;
    }
    pthread_mutex_unlock(&mu);
    if (tls_ctx == &contexts[deviceId]) {
        tls_ctx = NULL;
    }
    return ACL_SUCCESS;
}

/* aclrtGetDeviceSatMode and aclrtSetDeviceSatMode act on the device of the
 * calling thread's current context. */
KSIM_API aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode) {
    FAIL_POINT("aclrtGetDeviceSatMode");
    aclError e = need_ctx("aclrtGetDeviceSatMode");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (mode == NULL) {
        ksim_set_error("aclrtGetDeviceSatMode: mode is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    pthread_mutex_lock(&mu);
    satmode_refresh();
    *mode = satmode[tls_ctx->device];
    pthread_mutex_unlock(&mu);
    return ACL_SUCCESS;
}

KSIM_API aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode) {
    FAIL_POINT("aclrtSetDeviceSatMode");
    aclError e = need_ctx("aclrtSetDeviceSatMode");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (mode != ACL_RT_OVERFLOW_MODE_SATURATION && mode != ACL_RT_OVERFLOW_MODE_INFNAN) {
        ksim_set_error("aclrtSetDeviceSatMode: mode %d is not valid", mode);
        return ACL_ERROR_INVALID_PARAM;
    }
    pthread_mutex_lock(&mu);
    satmode_refresh();
    satmode[tls_ctx->device] = mode;
    pthread_mutex_unlock(&mu);
    return ACL_SUCCESS;
}

/* kitchenSimDeviceSatMode returns a device's overflow mode. Only tests call
 * it. */
KSIM_API int kitchenSimDeviceSatMode(int device) {
    if (device < 0 || device >= MAX_DEVICES) {
        return -1;
    }
    pthread_mutex_lock(&mu);
    satmode_refresh();
    int m = satmode[device];
    pthread_mutex_unlock(&mu);
    return m;
}

KSIM_API aclError aclrtGetCurrentContext(aclrtContext *context) {
    FAIL_POINT("aclrtGetCurrentContext");
    aclError e = need_ctx("aclrtGetCurrentContext");
    if (e != ACL_SUCCESS) {
        return e;
    }
    *context = tls_ctx;
    return ACL_SUCCESS;
}

KSIM_API aclError aclrtSetCurrentContext(aclrtContext ctx) {
    FAIL_POINT("aclrtSetCurrentContext");
    aclError e = need_init("aclrtSetCurrentContext");
    if (e != ACL_SUCCESS) {
        return e;
    }
    context *c = ctx;
    bool ok = false;
    for (int i = 0; i < MAX_DEVICES; i++) {
        ok = ok || (c == &contexts[i] && c->magic == MAGIC_CTX);
    }
    if (!ok) {
        ksim_set_error("aclrtSetCurrentContext: %p is not a context", ctx);
        return ACL_ERROR_RT_INVALID_HANDLE;
    }
    tls_ctx = c;
    return ACL_SUCCESS;
}

/* ---- memory ---- */

typedef struct {
    uintptr_t addr;
    size_t size;
    unsigned char *host;
} allocation;

static allocation *allocs;
static size_t nallocs, capallocs;
/* Device addresses come from a range that is not host memory; they are
 * aligned to 512 bytes and never reused. */
static uintptr_t next_addr = (uintptr_t)0x5a0000000000ull;

static char alloc_fail_spec[64];
static long alloc_fail_seen;

/* alloc_should_fail implements KITCHEN_SIM_FAIL_ALLOC=N: counting from when
 * the variable last took its current value, the Nth allocation and every
 * one after it fails. */
static bool alloc_should_fail(void) {
    const char *v = getenv("KITCHEN_SIM_FAIL_ALLOC");
    if (v == NULL || *v == 0) {
        alloc_fail_spec[0] = 0;
        return false;
    }
    if (strncmp(v, alloc_fail_spec, sizeof alloc_fail_spec) != 0) {
        snprintf(alloc_fail_spec, sizeof alloc_fail_spec, "%s", v);
        alloc_fail_seen = 0;
    }
    alloc_fail_seen++;
    long n = atol(v);
    return n > 0 && alloc_fail_seen >= n;
}

/* find_alloc returns the allocation holding [addr, addr+n), or NULL. The
 * caller holds mu. */
static allocation *find_alloc(uintptr_t addr, size_t n) {
    for (size_t i = 0; i < nallocs; i++) {
        allocation *a = &allocs[i];
        if (addr >= a->addr && addr - a->addr <= a->size && n <= a->size - (addr - a->addr)) {
            return a;
        }
    }
    return NULL;
}

KSIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    (void)policy;
    FAIL_POINT("aclrtMalloc");
    aclError e = need_ctx("aclrtMalloc");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (devPtr == NULL || size == 0) {
        ksim_set_error("aclrtMalloc: devPtr is NULL or size is 0");
        return ACL_ERROR_INVALID_PARAM;
    }
    pthread_mutex_lock(&mu);
    if (alloc_should_fail()) {
        pthread_mutex_unlock(&mu);
        ksim_set_error("aclrtMalloc: out of device memory allocating %zu bytes (KITCHEN_SIM_FAIL_ALLOC)", size);
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    }
    unsigned char *host = calloc(1, size);
    if (host == NULL) {
        pthread_mutex_unlock(&mu);
        ksim_set_error("aclrtMalloc: out of host memory allocating %zu bytes", size);
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    }
    if (nallocs == capallocs) {
        capallocs = capallocs ? 2 * capallocs : 64;
        allocs = realloc(allocs, capallocs * sizeof *allocs);
    }
    allocation *a = &allocs[nallocs++];
    a->addr = next_addr;
    a->size = size;
    a->host = host;
    next_addr += (size + 1023) / 512 * 512;
    stats.liveAllocs++;
    stats.liveBytes += (int64_t)size;
    stats.totalAllocs++;
    *devPtr = (void *)a->addr;
    pthread_mutex_unlock(&mu);
    return ACL_SUCCESS;
}

KSIM_API aclError aclrtFree(void *devPtr) {
    FAIL_POINT("aclrtFree");
    aclError e = need_ctx("aclrtFree");
    if (e != ACL_SUCCESS) {
        return e;
    }
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nallocs; i++) {
        if (allocs[i].addr == (uintptr_t)devPtr) {
            free(allocs[i].host);
            stats.liveAllocs--;
            stats.liveBytes -= (int64_t)allocs[i].size;
            allocs[i] = allocs[--nallocs];
            pthread_mutex_unlock(&mu);
            return ACL_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    ksim_set_error("aclrtFree: %p is not the start of a live allocation", devPtr);
    return ACL_ERROR_RT_PARAM_INVALID;
}

/* aclrtMemcpy is synchronous with the host but, as documented for the
 * runtime, not ordered with work queued on streams: synchronize first. */
KSIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
    FAIL_POINT("aclrtMemcpy");
    aclError e = need_ctx("aclrtMemcpy");
    if (e != ACL_SUCCESS) {
        return e;
    }
    if (count > destMax) {
        ksim_set_error("aclrtMemcpy: count %zu exceeds destMax %zu", count, destMax);
        return ACL_ERROR_INVALID_PARAM;
    }
    pthread_mutex_lock(&mu);
    unsigned char *d = dst;
    const unsigned char *s = src;
    allocation *a;
    switch (kind) {
    case ACL_MEMCPY_HOST_TO_DEVICE:
        if ((a = find_alloc((uintptr_t)dst, count)) == NULL) {
            goto bad_dst;
        }
        d = a->host + ((uintptr_t)dst - a->addr);
        stats.h2dCopies++;
        stats.h2dBytes += (int64_t)count;
        break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
        if ((a = find_alloc((uintptr_t)src, count)) == NULL) {
            goto bad_src;
        }
        s = a->host + ((uintptr_t)src - a->addr);
        stats.d2hCopies++;
        stats.d2hBytes += (int64_t)count;
        break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
        if ((a = find_alloc((uintptr_t)dst, count)) == NULL) {
            goto bad_dst;
        }
        d = a->host + ((uintptr_t)dst - a->addr);
        if ((a = find_alloc((uintptr_t)src, count)) == NULL) {
            goto bad_src;
        }
        s = a->host + ((uintptr_t)src - a->addr);
        stats.d2dCopies++;
        stats.d2dBytes += (int64_t)count;
        break;
    case ACL_MEMCPY_HOST_TO_HOST:
        break;
    default:
        pthread_mutex_unlock(&mu);
        ksim_set_error("aclrtMemcpy: kind %d is not simulated", kind);
        return ACL_ERROR_INVALID_PARAM;
    }
    memmove(d, s, count);
    pthread_mutex_unlock(&mu);
    return ACL_SUCCESS;
bad_dst:
    pthread_mutex_unlock(&mu);
    ksim_set_error("aclrtMemcpy: destination %p+%zu is not live device memory", dst, count);
    return ACL_ERROR_INVALID_PARAM;
bad_src:
    pthread_mutex_unlock(&mu);
    ksim_set_error("aclrtMemcpy: source %p+%zu is not live device memory", src, count);
    return ACL_ERROR_INVALID_PARAM;
}

/* ---- streams ---- */

typedef struct {
    uint32_t magic;
    context *ctx;
    aclrtFloatOverflowMode satmode; /* the device's mode when the stream was made */
    ksim_exec *head, *tail;
} stream;

KSIM_API aclError aclrtCreateStream(aclrtStream *out) {
    FAIL_POINT("aclrtCreateStream");
    aclError e = need_ctx("aclrtCreateStream");
    if (e != ACL_SUCCESS) {
        return e;
    }
    stream *s = calloc(1, sizeof *s);
    s->magic = MAGIC_STREAM;
    s->ctx = tls_ctx;
    pthread_mutex_lock(&mu);
    satmode_refresh();
    s->satmode = satmode[tls_ctx->device];
    set_add(&streams, s);
    pthread_mutex_unlock(&mu);
    *out = s;
    return ACL_SUCCESS;
}

static void free_exec(ksim_exec *e) {
    e->magic = 0;
    free(e);
}

/* run_queue runs the stream's tasks in order. The caller holds mu. */
static aclError run_queue(stream *s, const char *call) {
    aclError first = ACL_SUCCESS;
    for (ksim_exec *e = s->head, *next; e != NULL; e = next) {
        next = e->next;
        stats.pendingTasks--;
        if (first == ACL_SUCCESS) {
            char msg[512] = "";
            for (int i = 0; i < KSIM_MAX_TENSORS; i++) {
                ksim_tensor *t = &e->t[i];
                e->host[i] = NULL;
                if (t->magic == 0) {
                    continue;
                }
                size_t es = ksim_dtype_size(t->dtype);
                int64_t last = t->offset;
                bool empty = false;
                for (uint64_t d = 0; d < t->ndim; d++) {
                    empty = empty || t->dims[d] == 0;
                    last += (t->dims[d] - 1) * t->strides[d];
                }
                if (empty) {
                    continue;
                }
                if (t->addr % KSIM_ALIGN != 0) {
                    /* CANN's kernels move data between global memory and the
                     * cores in 32-byte blocks; an unaligned tensor faults
                     * when the kernel runs (see README.md). */
                    ksim_set_error("%s: %s: vector core exception: tensor %d's device address %#lx is not %d-byte "
                                   "aligned",
                                   call, e->op, i, (unsigned long)t->addr, KSIM_ALIGN);
                    first = ACL_ERROR_RT_VECTOR_CORE_EXCEPTION;
                    break;
                }
                uintptr_t start = t->addr + (uintptr_t)(t->offset * (int64_t)es);
                size_t n = (size_t)(last - t->offset + 1) * es;
                allocation *a = find_alloc(start, n);
                if (a == NULL) {
                    ksim_set_error("%s: %s uses device memory %#lx+%zu that is not allocated (freed before the "
                                   "stream was synchronized?)",
                                   call, e->op, (unsigned long)start, n);
                    first = ACL_ERROR_RT_DRV_INTERNAL_ERROR;
                    break;
                }
                e->host[i] = a->host + (start - a->addr);
            }
            if (first == ACL_SUCCESS) {
                int rc = e->kernel(e, msg, sizeof msg);
                if (rc != 0) {
                    ksim_set_error("%s: %s failed on the device: %s", call, e->op, msg);
                    first = rc;
                }
            }
        }
        free_exec(e);
    }
    s->head = s->tail = NULL;
    return first;
}

static stream *check_stream(aclrtStream st, const char *call, aclError *err) {
    stream *s = st;
    if (!set_has(&streams, s)) {
        ksim_set_error("%s: %p is not a stream", call, st);
        *err = ACL_ERROR_RT_INVALID_HANDLE;
        return NULL;
    }
    if (s->ctx != tls_ctx) {
        ksim_set_error("%s: stream belongs to another context", call);
        *err = ACL_ERROR_RT_STREAM_CONTEXT;
        return NULL;
    }
    return s;
}

/* drop_queue discards a stream's tasks without running them. The caller
 * holds mu. */
static void drop_queue(stream *s) {
    for (ksim_exec *e = s->head, *next; e != NULL; e = next) {
        next = e->next;
        stats.pendingTasks--;
        free_exec(e);
    }
    s->head = s->tail = NULL;
}

KSIM_API aclError aclrtSynchronizeStream(aclrtStream st) {
    int code;
    if (ksim_fail("aclrtSynchronizeStream", &code)) {
        /* A failed synchronization leaves nothing queued: the tasks are lost. */
        pthread_mutex_lock(&mu);
        if (set_has(&streams, st)) {
            drop_queue(st);
        }
        pthread_mutex_unlock(&mu);
        return code;
    }
    aclError e = need_ctx("aclrtSynchronizeStream");
    if (e != ACL_SUCCESS) {
        return e;
    }
    pthread_mutex_lock(&mu);
    stream *s = check_stream(st, "aclrtSynchronizeStream", &e);
    if (s != NULL) {
        stats.syncs++;
        e = run_queue(s, "aclrtSynchronizeStream");
    }
    pthread_mutex_unlock(&mu);
    return e;
}

KSIM_API aclError aclrtDestroyStream(aclrtStream st) {
    FAIL_POINT("aclrtDestroyStream");
    aclError e = need_ctx("aclrtDestroyStream");
    if (e != ACL_SUCCESS) {
        return e;
    }
    pthread_mutex_lock(&mu);
    stream *s = check_stream(st, "aclrtDestroyStream", &e);
    if (s != NULL) {
        if (s->head != NULL) {
            /* CANN requires a synchronize first; the simulator runs the tasks
             * and reports the misuse. */
            run_queue(s, "aclrtDestroyStream");
            ksim_set_error("aclrtDestroyStream: the stream had unsynchronized tasks");
            e = ACL_ERROR_RT_PARAM_INVALID;
        }
        set_remove(&streams, s);
        s->magic = 0;
        free(s);
    }
    pthread_mutex_unlock(&mu);
    return e;
}

/* ---- aclTensor, aclScalar, aclIntArray (exported by libnnopbase.so) ---- */

KSIM_API size_t ksim_dtype_size(aclDataType dt) {
    switch (dt) {
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
        return 4;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16:
        return 2;
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL:
        return 1;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
        return 8;
    }
    return 0;
}

KSIM_API ksim_tensor *ksim_tensor_create(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                         const int64_t *stride, int64_t offset, aclFormat format,
                                         const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData) {
    int code;
    if (ksim_fail("aclCreateTensor", &code)) {
        return NULL;
    }
    if (viewDimsNum > KSIM_MAX_DIMS || storageDimsNum > KSIM_MAX_DIMS) {
        ksim_set_error("aclCreateTensor: more than %d dimensions", KSIM_MAX_DIMS);
        return NULL;
    }
    if ((viewDimsNum > 0 && (viewDims == NULL || stride == NULL)) || (storageDimsNum > 0 && storageDims == NULL)) {
        ksim_set_error("aclCreateTensor: NULL dimension array");
        return NULL;
    }
    if (ksim_dtype_size(dataType) == 0) {
        ksim_set_error("aclCreateTensor: data type %d is not simulated", dataType);
        return NULL;
    }
    if (format != ACL_FORMAT_ND) {
        ksim_set_error("aclCreateTensor: format %d is not simulated (only ACL_FORMAT_ND)", format);
        return NULL;
    }
    if (offset < 0) {
        ksim_set_error("aclCreateTensor: negative offset %lld", (long long)offset);
        return NULL;
    }
    ksim_tensor *t = calloc(1, sizeof *t);
    t->magic = MAGIC_TENSOR;
    t->dtype = dataType;
    t->ndim = viewDimsNum;
    int64_t extent = offset + 1, storage = 1;
    for (uint64_t i = 0; i < viewDimsNum; i++) {
        if (viewDims[i] < 0 || stride[i] < 0) {
            free(t);
            ksim_set_error("aclCreateTensor: negative dimension or stride");
            return NULL;
        }
        t->dims[i] = viewDims[i];
        t->strides[i] = stride[i];
        if (viewDims[i] == 0) {
            extent = 0;
        }
        if (extent > 0) {
            extent += (viewDims[i] - 1) * stride[i];
        }
    }
    t->nstorage = storageDimsNum;
    for (uint64_t i = 0; i < storageDimsNum; i++) {
        t->storage[i] = storageDims[i];
        storage *= storageDims[i];
    }
    if (extent > storage) {
        free(t);
        ksim_set_error("aclCreateTensor: the view needs %lld elements but the storage holds %lld",
                       (long long)extent, (long long)storage);
        return NULL;
    }
    t->offset = offset;
    t->format = format;
    t->addr = (uintptr_t)tensorData;
    pthread_mutex_lock(&mu);
    set_add(&tensors, t);
    stats.liveTensors++;
    pthread_mutex_unlock(&mu);
    return t;
}

KSIM_API aclnnStatus ksim_tensor_destroy(const ksim_tensor *t) {
    FAIL_POINT("aclDestroyTensor");
    if (t == NULL) {
        return ACL_SUCCESS;
    }
    pthread_mutex_lock(&mu);
    bool ok = set_remove(&tensors, t);
    if (ok) {
        stats.liveTensors--;
    }
    pthread_mutex_unlock(&mu);
    if (!ok) {
        ksim_set_error("aclDestroyTensor: %p is not a live tensor", (const void *)t);
        return ACLNN_ERR_PARAM_INVALID;
    }
    free((void *)t);
    return ACL_SUCCESS;
}

KSIM_API bool ksim_tensor_live(const ksim_tensor *t) {
    pthread_mutex_lock(&mu);
    bool ok = set_has(&tensors, t);
    pthread_mutex_unlock(&mu);
    return ok;
}

KSIM_API ksim_scalar *ksim_scalar_create(const void *value, aclDataType dataType) {
    int code;
    if (ksim_fail("aclCreateScalar", &code)) {
        return NULL;
    }
    if (value == NULL) {
        ksim_set_error("aclCreateScalar: value is NULL");
        return NULL;
    }
    ksim_scalar s = {.magic = MAGIC_SCALAR, .dtype = dataType};
    switch (dataType) {
    case ACL_FLOAT: {
        float f;
        memcpy(&f, value, 4);
        s.isfloat = true;
        s.f = f;
        break;
    }
    case ACL_DOUBLE:
        memcpy(&s.f, value, 8);
        s.isfloat = true;
        break;
    case ACL_INT64:
        memcpy(&s.i, value, 8);
        break;
    case ACL_INT32: {
        int32_t v;
        memcpy(&v, value, 4);
        s.i = v;
        break;
    }
    case ACL_INT8:
        s.i = *(const int8_t *)value;
        break;
    case ACL_UINT8:
        s.i = *(const uint8_t *)value;
        break;
    case ACL_BOOL:
        s.i = *(const uint8_t *)value != 0;
        break;
    default:
        ksim_set_error("aclCreateScalar: data type %d is not simulated", dataType);
        return NULL;
    }
    ksim_scalar *p = malloc(sizeof *p);
    *p = s;
    pthread_mutex_lock(&mu);
    set_add(&scalars, p);
    stats.liveScalars++;
    pthread_mutex_unlock(&mu);
    return p;
}

KSIM_API aclnnStatus ksim_scalar_destroy(const ksim_scalar *s) {
    FAIL_POINT("aclDestroyScalar");
    if (s == NULL) {
        return ACL_SUCCESS;
    }
    pthread_mutex_lock(&mu);
    bool ok = set_remove(&scalars, s);
    if (ok) {
        stats.liveScalars--;
    }
    pthread_mutex_unlock(&mu);
    if (!ok) {
        ksim_set_error("aclDestroyScalar: %p is not a live scalar", (const void *)s);
        return ACLNN_ERR_PARAM_INVALID;
    }
    free((void *)s);
    return ACL_SUCCESS;
}

KSIM_API bool ksim_scalar_live(const ksim_scalar *s) {
    pthread_mutex_lock(&mu);
    bool ok = set_has(&scalars, s);
    pthread_mutex_unlock(&mu);
    return ok;
}

KSIM_API ksim_intarray *ksim_intarray_create(const int64_t *value, uint64_t size) {
    int code;
    if (ksim_fail("aclCreateIntArray", &code)) {
        return NULL;
    }
    if (size > KSIM_MAX_DIMS || (size > 0 && value == NULL)) {
        ksim_set_error("aclCreateIntArray: %llu values at %p are not simulated (at most %d)",
                       (unsigned long long)size, (const void *)value, KSIM_MAX_DIMS);
        return NULL;
    }
    ksim_intarray *a = calloc(1, sizeof *a);
    a->magic = MAGIC_INTARR;
    a->n = size;
    memcpy(a->v, value, size * sizeof *value);
    pthread_mutex_lock(&mu);
    set_add(&intarrays, a);
    stats.liveIntArrays++;
    pthread_mutex_unlock(&mu);
    return a;
}

KSIM_API aclnnStatus ksim_intarray_destroy(const ksim_intarray *a) {
    FAIL_POINT("aclDestroyIntArray");
    if (a == NULL) {
        return ACL_SUCCESS;
    }
    pthread_mutex_lock(&mu);
    bool ok = set_remove(&intarrays, a);
    if (ok) {
        stats.liveIntArrays--;
    }
    pthread_mutex_unlock(&mu);
    if (!ok) {
        ksim_set_error("aclDestroyIntArray: %p is not a live int array", (const void *)a);
        return ACLNN_ERR_PARAM_INVALID;
    }
    free((void *)a);
    return ACL_SUCCESS;
}

KSIM_API bool ksim_intarray_live(const ksim_intarray *a) {
    pthread_mutex_lock(&mu);
    bool ok = set_has(&intarrays, a);
    pthread_mutex_unlock(&mu);
    return ok;
}

/* ---- executors ---- */

KSIM_API ksim_exec *ksim_exec_create(const char *op, ksim_kernel kernel, uint64_t ws) {
    ksim_exec *e = calloc(1, sizeof *e);
    e->magic = MAGIC_EXEC;
    snprintf(e->op, sizeof e->op, "%s", op);
    e->kernel = kernel;
    e->ws = ws;
    pthread_mutex_lock(&mu);
    set_add(&execs, e);
    stats.liveExecutors++;
    pthread_mutex_unlock(&mu);
    return e;
}

/* ksim_exec_set_repeatable implements aclSetAclOpExecutorRepeatable: the
 * executor then survives its second phases, until aclDestroyAclOpExecutor. */
KSIM_API aclnnStatus ksim_exec_set_repeatable(ksim_exec *e) {
    FAIL_POINT("aclSetAclOpExecutorRepeatable");
    pthread_mutex_lock(&mu);
    bool ok = set_has(&execs, e);
    if (ok) {
        e->repeatable = true;
    }
    pthread_mutex_unlock(&mu);
    if (!ok) {
        ksim_set_error("aclSetAclOpExecutorRepeatable: %p is not a live executor", (void *)e);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACL_SUCCESS;
}

/* ksim_exec_destroy implements aclDestroyAclOpExecutor, which CANN documents
 * for executors made repeatable by aclSetAclOpExecutorRepeatable: it refuses
 * any other executor (which stays live, and is counted as such). */
KSIM_API aclnnStatus ksim_exec_destroy(ksim_exec *e) {
    FAIL_POINT("aclDestroyAclOpExecutor");
    pthread_mutex_lock(&mu);
    bool live = set_has(&execs, e);
    bool ok = live && e->repeatable;
    if (ok) {
        set_remove(&execs, e);
        stats.liveExecutors--;
    }
    pthread_mutex_unlock(&mu);
    if (!live) {
        ksim_set_error("aclDestroyAclOpExecutor: %p is not a live executor", (void *)e);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!ok) {
        ksim_set_error("aclDestroyAclOpExecutor: executor %p of %s is not repeatable (call "
                       "aclSetAclOpExecutorRepeatable first)",
                       (void *)e, e->op);
        return ACLNN_ERR_PARAM_INVALID;
    }
    free_exec(e);
    return ACL_SUCCESS;
}

/* ksim_launch is the second phase of every aclnn operator. Whatever it
 * returns, a non-repeatable executor is consumed (CANN frees it when its
 * second phase runs); a repeatable one stays live and a copy is queued. */
KSIM_API aclnnStatus ksim_launch(const char *op, void *workspace, uint64_t workspaceSize, ksim_exec *e,
                                 aclrtStream st) {
    int code = 0;
    bool injected = ksim_fail(op, &code);
    aclError err = injected ? ACL_SUCCESS : need_ctx(op);
    pthread_mutex_lock(&mu);
    if (!set_has(&execs, e)) {
        pthread_mutex_unlock(&mu);
        if (injected) {
            return code;
        }
        ksim_set_error("%s: executor %p is not live (already run or destroyed)", op, (void *)e);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (e->repeatable) {
        ksim_exec *copy = malloc(sizeof *copy);
        *copy = *e;
        e = copy;
    } else {
        set_remove(&execs, e);
        stats.liveExecutors--;
    }
    if (injected) {
        pthread_mutex_unlock(&mu);
        free_exec(e);
        return code;
    }
    if (err == ACL_SUCCESS && strcmp(e->op, op) != 0) {
        ksim_set_error("%s: the executor was made by %sGetWorkspaceSize", op, e->op);
        err = ACLNN_ERR_PARAM_INVALID;
    }
    if (err == ACL_SUCCESS && e->ws > 0 &&
        (workspaceSize < e->ws || find_alloc((uintptr_t)workspace, (size_t)workspaceSize) == NULL)) {
        ksim_set_error("%s: workspace %p+%llu is not live device memory of the %llu bytes asked for", op, workspace,
                       (unsigned long long)workspaceSize, (unsigned long long)e->ws);
        err = ACLNN_ERR_PARAM_INVALID;
    }
    for (int i = 0; err == ACL_SUCCESS && i < KSIM_MAX_TENSORS; i++) {
        if (e->orig[i] != NULL && !set_has(&tensors, e->orig[i])) {
            ksim_set_error("%s: an aclTensor passed to the first phase was destroyed before the second", op);
            err = ACLNN_ERR_PARAM_INVALID;
        }
    }
    stream *s = NULL;
    if (err == ACL_SUCCESS) {
        s = check_stream(st, op, &err);
    }
    if (err != ACL_SUCCESS) {
        pthread_mutex_unlock(&mu);
        free_exec(e);
        return err;
    }
    e->next = NULL;
    if (s->tail) {
        s->tail->next = e;
    } else {
        s->head = e;
    }
    s->tail = e;
    stats.launches++;
    stats.pendingTasks++;
    count_op(op);
    pthread_mutex_unlock(&mu);
    return ACL_SUCCESS;
}
