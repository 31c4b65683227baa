/*
 * Internal interface of kitchen's CANN ABI simulator.
 *
 * The simulator is three shared libraries with the names and exported
 * signatures of CANN's: libascendcl.so (runtime), libnnopbase.so (aclTensor,
 * aclScalar, aclIntArray, executors) and libopapi.so (the aclnn operators).
 * All state lives in libascendcl.so; the other two call the ksim_* functions
 * declared here, which libascendcl.so exports besides the real API. Only the
 * tests of kitchen use the simulator; see README.md beside this directory.
 */
#ifndef KSIM_H
#define KSIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KSIM_API __attribute__((visibility("default")))

/* Types of acl_base.h and aclnn/acl_meta.h. */
typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;
typedef void *aclrtContext;
typedef int aclDataType;     /* enum aclDataType */
typedef int aclFormat;       /* enum aclFormat */
typedef int aclrtMemcpyKind; /* enum aclrtMemcpyKind */
typedef int aclrtMemMallocPolicy;
typedef int aclrtFloatOverflowMode; /* enum aclrtFloatOverflowMode */

/* aclrtFloatOverflowMode values (acl_rt.h). */
enum {
    ACL_RT_OVERFLOW_MODE_SATURATION = 0,
    ACL_RT_OVERFLOW_MODE_INFNAN = 1,
};

/* aclDataType values (acl_base.h). */
enum {
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27,
};

enum { ACL_FORMAT_ND = 2 };

/* aclrtMemcpyKind values (acl_rt.h). */
enum {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
};

/* Error codes (acl_base.h, error_codes/rt_error_codes.h, aclnn/opdev/op_errno.h). */
enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_INVALID_PARAM = 100000,
    ACL_ERROR_UNINITIALIZE = 100001,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_RT_PARAM_INVALID = 107000,
    ACL_ERROR_RT_INVALID_DEVICEID = 107001,
    ACL_ERROR_RT_CONTEXT_NULL = 107002,
    ACL_ERROR_RT_STREAM_CONTEXT = 107003,
    ACL_ERROR_RT_ADDR_UNALIGNED = 107008,
    ACL_ERROR_RT_INVALID_HANDLE = 107017,
    ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
    ACL_ERROR_RT_NO_DEVICE = 207004,
    ACL_ERROR_RT_INTERNAL_ERROR = 507000,
    ACL_ERROR_RT_VECTOR_CORE_EXCEPTION = 507035,
    ACL_ERROR_RT_DRV_INTERNAL_ERROR = 507899,
    ACLNN_ERR_PARAM_NULLPTR = 161001,
    ACLNN_ERR_PARAM_INVALID = 161002,
    ACLNN_ERR_RUNTIME_ERROR = 361001,
    ACLNN_ERR_INNER_NULLPTR = 561103,
};

#define KSIM_MAX_DIMS 8
#define KSIM_MAX_TENSORS 6
#define KSIM_MAX_SCALARS 3

/* aclTensor: a view of device memory. */
typedef struct ksim_tensor {
    uint32_t magic;
    aclDataType dtype;
    uint64_t ndim;
    int64_t dims[KSIM_MAX_DIMS];
    int64_t strides[KSIM_MAX_DIMS];
    int64_t offset; /* in elements */
    aclFormat format;
    uint64_t nstorage;
    int64_t storage[KSIM_MAX_DIMS];
    uintptr_t addr; /* opaque device address of the storage */
} ksim_tensor;

/* aclScalar: a host value copied at creation. */
typedef struct ksim_scalar {
    uint32_t magic;
    aclDataType dtype;
    bool isfloat;
    double f;  /* the value, when isfloat (exact for float, half and bfloat16) */
    int64_t i; /* the value, when !isfloat */
} ksim_scalar;

/* aclIntArray: host integers copied at creation. */
typedef struct ksim_intarray {
    uint32_t magic;
    uint64_t n;
    int64_t v[KSIM_MAX_DIMS];
} ksim_intarray;

typedef struct ksim_exec ksim_exec;

/* A kernel runs an operator on host copies of the tensors' data; it returns
 * 0 or an error code with a message. */
typedef int (*ksim_kernel)(ksim_exec *e, char *msg, size_t msglen);

/* aclOpExecutor: what the first phase of an aclnn call captured. */
struct ksim_exec {
    uint32_t magic;
    char op[64];                        /* e.g. "aclnnAmax" */
    ksim_tensor t[KSIM_MAX_TENSORS];    /* snapshots; t[i].magic == 0: absent */
    const ksim_tensor *orig[KSIM_MAX_TENSORS];
    unsigned char *host[KSIM_MAX_TENSORS]; /* set by the runtime before the kernel runs */
    ksim_scalar s[KSIM_MAX_SCALARS];
    int64_t iarg[KSIM_MAX_DIMS + 4];
    int niarg;
    uint64_t ws;
    bool repeatable; /* aclSetAclOpExecutorRepeatable was called */
    ksim_kernel kernel;
    ksim_exec *next; /* stream queue */
};

/* Error reporting and fault injection. */
KSIM_API void ksim_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* ksim_fail reports whether KITCHEN_SIM_FAIL names this call; if so it sets
 * the recent error message and *code. */
KSIM_API bool ksim_fail(const char *name, int *code);

/* Handles. */
KSIM_API ksim_tensor *ksim_tensor_create(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                         const int64_t *stride, int64_t offset, aclFormat format,
                                         const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData);
KSIM_API aclnnStatus ksim_tensor_destroy(const ksim_tensor *t);
KSIM_API bool ksim_tensor_live(const ksim_tensor *t);
KSIM_API ksim_scalar *ksim_scalar_create(const void *value, aclDataType dataType);
KSIM_API aclnnStatus ksim_scalar_destroy(const ksim_scalar *s);
KSIM_API bool ksim_scalar_live(const ksim_scalar *s);
KSIM_API ksim_intarray *ksim_intarray_create(const int64_t *value, uint64_t size);
KSIM_API aclnnStatus ksim_intarray_destroy(const ksim_intarray *a);
KSIM_API bool ksim_intarray_live(const ksim_intarray *a);

/* Executors: created by a first phase, consumed by the second. */
KSIM_API ksim_exec *ksim_exec_create(const char *op, ksim_kernel kernel, uint64_t ws);
KSIM_API aclnnStatus ksim_exec_set_repeatable(ksim_exec *e);
KSIM_API aclnnStatus ksim_exec_destroy(ksim_exec *e);
KSIM_API aclnnStatus ksim_launch(const char *op, void *workspace, uint64_t workspaceSize, ksim_exec *e,
                                 aclrtStream stream);

/* Element sizes. */
KSIM_API size_t ksim_dtype_size(aclDataType dt);

/* The alignment CANN expects of a tensor's device address. */
#define KSIM_ALIGN 32

/* Behaviour knobs, read from the environment at every call (README.md). */
/* KITCHEN_SIM_MINMAX_NAN=ignore: min/max reductions and aclnnMaximum skip NaN. */
KSIM_API bool ksim_minmax_ignores_nan(void);
/* KITCHEN_SIM_NAN_TO_INT=N: the integer a NaN gives when aclnnQuantize or
 * aclnnDynamicQuantV2 rounds it to int8 (default 0); aclnnCast always gives 0. */
KSIM_API int64_t ksim_nan_to_int(void);

#endif
