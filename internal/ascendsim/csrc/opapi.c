/*
 * libopapi.so of kitchen's CANN ABI simulator: the aclnn operators kitchen
 * uses, each as the two-phase pair of aclnnop/aclnn_*.h. The first phase
 * checks its arguments, snapshots the tensor descriptors into an executor and
 * asks for a workspace; the second queues the executor on a stream; the
 * kernel runs when the stream is synchronized (libascendcl.so).
 *
 * Arithmetic is IEEE float32 with round-to-nearest-even (the library is
 * built with -ffp-contract=off, so no fused multiply-add), float16 and
 * bfloat16 are widened exactly and rounded to nearest even, integer
 * arithmetic is exact int64. Where an operator's exact behaviour on the
 * NPU is not documented, README.md says what is simulated.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann.h"

/* ---- number formats ---- */

static float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        float v = (float)man * 0x1p-24f; /* exact */
        return sign ? -v : v;
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* f2h rounds to nearest even, overflowing to infinity. */
static uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* infinity or NaN (kept quiet) */
        return sign | 0x7c00 | (ax > 0x7f800000u ? (uint16_t)(0x200 | ((ax >> 13) & 0x3ff)) : 0);
    }
    if (ax >= 0x477ff000u) { /* >= 65520 rounds to infinity */
        return sign | 0x7c00;
    }
    if (ax >= 0x38800000u) { /* normal: round at bit 13 */
        ax += 0xfffu + ((ax >> 13) & 1);
        ax -= (uint32_t)(127 - 15) << 23;
        return sign | (uint16_t)(ax >> 13);
    }
    float a;
    memcpy(&a, &ax, 4);
    return sign | (uint16_t)rintf(a * 0x1p24f); /* subnormal in units of 2^-24; exact scaling */
}

static float bf2f(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f2bf(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40);
    }
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static bool is_float(aclDataType dt) {
    return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16 || dt == ACL_DOUBLE;
}

static bool is_int(aclDataType dt) {
    return dt == ACL_INT8 || dt == ACL_UINT8 || dt == ACL_INT16 || dt == ACL_UINT16 || dt == ACL_INT32 ||
           dt == ACL_UINT32 || dt == ACL_INT64 || dt == ACL_UINT64 || dt == ACL_BOOL;
}

static float getf(aclDataType dt, const unsigned char *p) {
    switch (dt) {
    case ACL_FLOAT: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case ACL_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return h2f(h);
    }
    case ACL_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return bf2f(h);
    }
    case ACL_DOUBLE: {
        double d;
        memcpy(&d, p, 8);
        return (float)d;
    }
    }
    int64_t v;
    switch (dt) {
    case ACL_INT8:
        return (float)*(const int8_t *)p;
    case ACL_UINT8:
    case ACL_BOOL:
        return (float)*p;
    case ACL_INT32: {
        int32_t i;
        memcpy(&i, p, 4);
        return (float)i;
    }
    default:
        memcpy(&v, p, 8);
        return (float)v;
    }
}

static int64_t geti(aclDataType dt, const unsigned char *p) {
    switch (dt) {
    case ACL_INT8:
        return *(const int8_t *)p;
    case ACL_UINT8:
        return *p;
    case ACL_BOOL:
        return *p != 0;
    case ACL_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case ACL_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case ACL_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case ACL_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case ACL_INT64:
    case ACL_UINT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
    float f = getf(dt, p);
    if (f != f) {
        return 0;
    }
    if (f >= 0x1p63f) {
        return INT64_MAX;
    }
    if (f <= -0x1p63f) {
        return INT64_MIN;
    }
    return (int64_t)f;
}

/* puti stores an integer, wrapping to narrower integer types (two's
 * complement, as torch's .to() does) and rounding to float types. */
static void puti(aclDataType dt, unsigned char *p, int64_t v) {
    switch (dt) {
    case ACL_INT8:
    case ACL_UINT8:
        *p = (unsigned char)v;
        return;
    case ACL_BOOL:
        *p = v != 0;
        return;
    case ACL_INT16:
    case ACL_UINT16: {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
        return;
    }
    case ACL_INT32:
    case ACL_UINT32: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        return;
    }
    case ACL_INT64:
    case ACL_UINT64:
        memcpy(p, &v, 8);
        return;
    case ACL_DOUBLE: {
        double d = (double)v;
        memcpy(p, &d, 8);
        return;
    }
    }
    float f = (float)v;
    switch (dt) {
    case ACL_FLOAT:
        memcpy(p, &f, 4);
        return;
    case ACL_FLOAT16: {
        uint16_t h = f2h(f);
        memcpy(p, &h, 2);
        return;
    }
    case ACL_BF16: {
        uint16_t h = f2bf(f);
        memcpy(p, &h, 2);
        return;
    }
    }
}

/* float_to_int converts a float32 value to an integer for the integer type
 * dt, as aclnnCast does: NaN gives 0 (documented: the aclnnCast constraints
 * in hicann/ops-math math/cast say that NaN converted from a floating-point
 * type to an integer type becomes 0); otherwise the value is truncated
 * toward zero, saturated to int64 for the 64-bit types and to int32 for the
 * others, and puti then keeps the low bits of narrower types (wraps modulo
 * 2^8 or 2^16). Out-of-range conversions are not documented; wrapping is
 * what the 8.1.RC1 Cast kernel (impl/dynamic/cast.py) does for float16 and
 * bfloat16 to int8 (truncate to int32, keep the low 8 bits), and it is the
 * simulator's choice for every narrow type, so that a caller that relies on
 * saturation gets wrong numbers here instead of right ones by luck. */
static int64_t float_to_int(aclDataType dt, float f) {
    if (f != f) {
        return 0;
    }
    double t = trunc((double)f), lo = -0x1p31, hi = 0x1p31 - 1;
    if (dt == ACL_INT64 || dt == ACL_UINT64) {
        lo = -0x1p63, hi = 0x1p63;
    }
    t = t < lo ? lo : t > hi ? hi : t;
    return t >= 0x1p63 ? INT64_MAX : (int64_t)t;
}

/* putf stores a float32 value: rounded to nearest even for float16 and
 * bfloat16, converted by float_to_int for integer types. */
static void putf(aclDataType dt, unsigned char *p, float f) {
    switch (dt) {
    case ACL_FLOAT:
        memcpy(p, &f, 4);
        return;
    case ACL_FLOAT16: {
        uint16_t h = f2h(f);
        memcpy(p, &h, 2);
        return;
    }
    case ACL_BF16: {
        uint16_t h = f2bf(f);
        memcpy(p, &h, 2);
        return;
    }
    case ACL_DOUBLE: {
        double d = f;
        memcpy(p, &d, 8);
        return;
    }
    case ACL_BOOL:
        *p = f != 0;
        return;
    }
    puti(dt, p, float_to_int(dt, f));
}

/* getd widens an element to double, exactly for every type the simulator
 * stores. */
static double getd(aclDataType dt, const unsigned char *p) {
    if (dt == ACL_DOUBLE) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    return is_float(dt) ? (double)getf(dt, p) : (double)geti(dt, p);
}

/* putd stores a double: as it is in a double, rounded once to nearest even
 * in a float32, and through float32 for the other types (two roundings; no
 * caller narrows double further than float32). */
static void putd(aclDataType dt, unsigned char *p, double v) {
    if (dt == ACL_DOUBLE) {
        memcpy(p, &v, 8);
        return;
    }
    putf(dt, p, (float)v);
}

/* ---- shapes and iteration ---- */

static int64_t numel(const ksim_tensor *t) {
    int64_t n = 1;
    for (uint64_t i = 0; i < t->ndim; i++) {
        n *= t->dims[i];
    }
    return n;
}

/* operand walks a tensor broadcast to an output shape. */
typedef struct {
    unsigned char *base;
    aclDataType dt;
    size_t es;
    int64_t bstride[KSIM_MAX_DIMS];
} operand;

static void operand_init(operand *o, const ksim_tensor *t, unsigned char *base, const ksim_tensor *out) {
    memset(o, 0, sizeof *o);
    o->base = base;
    o->dt = t->dtype;
    o->es = ksim_dtype_size(t->dtype);
    int shift = (int)out->ndim - (int)t->ndim;
    for (int d = 0; d < (int)out->ndim; d++) {
        int j = d - shift;
        o->bstride[d] = (j < 0 || t->dims[j] == 1) ? 0 : t->strides[j];
    }
}

/* broadcasts reports whether t broadcasts to shape. */
static bool broadcasts(const ksim_tensor *t, const int64_t *dims, int nd) {
    if ((int)t->ndim > nd) {
        return false;
    }
    int shift = nd - (int)t->ndim;
    for (int j = 0; j < (int)t->ndim; j++) {
        if (t->dims[j] != 1 && t->dims[j] != dims[j + shift]) {
            return false;
        }
    }
    return true;
}

/* broadcast_shape computes the broadcast of a and b (b may be NULL). */
static bool broadcast_shape(const ksim_tensor *a, const ksim_tensor *b, int64_t *dims, int *nd) {
    int n = (int)a->ndim;
    if (b && (int)b->ndim > n) {
        n = (int)b->ndim;
    }
    for (int d = 0; d < n; d++) {
        int ja = d - (n - (int)a->ndim);
        int64_t da = ja < 0 ? 1 : a->dims[ja];
        int64_t db = 1;
        if (b) {
            int jb = d - (n - (int)b->ndim);
            db = jb < 0 ? 1 : b->dims[jb];
        }
        if (da != db && da != 1 && db != 1) {
            return false;
        }
        dims[d] = da == 1 ? db : da;
    }
    *nd = n;
    return true;
}

static bool same_shape(const ksim_tensor *t, const int64_t *dims, int nd) {
    if ((int)t->ndim != nd) {
        return false;
    }
    for (int d = 0; d < nd; d++) {
        if (t->dims[d] != dims[d]) {
            return false;
        }
    }
    return true;
}

/* iterate advances the multi-index idx over out's shape and the operands'
 * element offsets with it; it returns false after the last element. */
static bool iterate(const ksim_tensor *out, int64_t *idx, operand *ops, int64_t *off, int nops) {
    for (int d = (int)out->ndim - 1; d >= 0; d--) {
        idx[d]++;
        for (int k = 0; k < nops; k++) {
            off[k] += ops[k].bstride[d];
        }
        if (idx[d] < out->dims[d]) {
            return true;
        }
        for (int k = 0; k < nops; k++) {
            off[k] -= ops[k].bstride[d] * out->dims[d];
        }
        idx[d] = 0;
    }
    return false;
}

#define AT(o, off) ((o).base + (size_t)(off) * (o).es)

/* ---- the two phases ---- */

static aclnnStatus bad(int code, const char *op, const char *fmt, const char *detail) {
    char buf[512];
    snprintf(buf, sizeof buf, fmt, detail);
    ksim_set_error("%sGetWorkspaceSize: %s", op, buf);
    return code;
}

#define FIRST_PHASE(op)                                                                                               \
    do {                                                                                                              \
        int code_;                                                                                                    \
        if (ksim_fail(op "GetWorkspaceSize", &code_)) {                                                               \
            return code_;                                                                                             \
        }                                                                                                             \
    } while (0)

#define REQUIRE(cond, code, op, msg)                                                                                  \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            return bad(code, op, "%s", msg);                                                                          \
        }                                                                                                             \
    } while (0)

#define SECOND_PHASE(name)                                                                                            \
    KSIM_API aclnnStatus name(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) { \
        return ksim_launch(#name, workspace, workspaceSize, (ksim_exec *)executor, stream);                          \
    }

static bool live_tensor(const aclTensor *t) {
    return t != NULL && ksim_tensor_live((const ksim_tensor *)t);
}

static bool live_scalar(const aclScalar *s) {
    return s != NULL && ksim_scalar_live((const ksim_scalar *)s);
}

static void snap(ksim_exec *e, int i, const aclTensor *t) {
    if (t != NULL) {
        e->t[i] = *(const ksim_tensor *)t;
        e->orig[i] = (const ksim_tensor *)t;
    }
}

static aclnnStatus finish(ksim_exec *e, uint64_t *workspaceSize, aclOpExecutor **executor) {
    *workspaceSize = e->ws;
    *executor = (aclOpExecutor *)e;
    return 0;
}

static float scalar_f(const ksim_scalar *s) {
    return s->isfloat ? (float)s->f : (float)s->i;
}

static int64_t scalar_i(const ksim_scalar *s) {
    return s->isfloat ? (int64_t)s->f : s->i;
}

/* ---- element-wise operators ---- */

enum {
    OP_ADD,
    OP_MUL,
    OP_DIV,
    OP_MAXIMUM,
    OP_FLOORDIV,
    OP_AND,
    OP_XOR,
    OP_EQ,
    OP_GT,
    OP_LOGAND,
    OP_CLAMPMIN,
};

/* k_binary: t[0] self, t[1] other (or scalar s[0]), t[2] out, s[1] alpha;
 * iarg[0] the operation. Float operands compute in float32, integer ones in
 * int64, and a double tensor operand makes the arithmetic double (CANN's
 * type promotion: a double tensor promotes its float32 partner; a scalar
 * does not promote a tensor), for add, mul and div. */
static int k_binary(ksim_exec *e, char *msg, size_t msglen) {
    int op = (int)e->iarg[0];
    bool has_b = e->t[1].magic != 0;
    const ksim_tensor *out = &e->t[2];
    operand ops[3];
    operand_init(&ops[0], &e->t[0], e->host[0], out);
    if (has_b) {
        operand_init(&ops[1], &e->t[1], e->host[1], out);
    } else {
        memset(&ops[1], 0, sizeof ops[1]);
    }
    operand_init(&ops[2], out, e->host[2], out);
    bool fl = is_float(e->t[0].dtype) || (has_b ? is_float(e->t[1].dtype) : e->s[0].isfloat);
    float alpha_f = e->s[1].magic ? scalar_f(&e->s[1]) : 1.0f;
    int64_t alpha_i = e->s[1].magic ? scalar_i(&e->s[1]) : 1;
    bool dbl = e->t[0].dtype == ACL_DOUBLE || (has_b && e->t[1].dtype == ACL_DOUBLE);
    double alpha_d = e->s[1].magic ? (e->s[1].isfloat ? e->s[1].f : (double)e->s[1].i) : 1.0;
    bool ignore_nan = ksim_minmax_ignores_nan();
    int64_t idx[KSIM_MAX_DIMS] = {0}, off[3] = {0};
    if (numel(out) == 0) {
        return 0;
    }
    do {
        unsigned char *po = AT(ops[2], off[2]);
        if (dbl) {
            double a = getd(ops[0].dt, AT(ops[0], off[0]));
            double b = has_b ? getd(ops[1].dt, AT(ops[1], off[1]))
                             : (e->s[0].isfloat ? e->s[0].f : (double)e->s[0].i);
            switch (op) {
            case OP_ADD:
                putd(ops[2].dt, po, a + alpha_d * b);
                continue;
            case OP_MUL:
                putd(ops[2].dt, po, a * b);
                continue;
            case OP_DIV:
                putd(ops[2].dt, po, a / b);
                continue;
            }
            snprintf(msg, msglen, "operation %d on double data is not simulated", op);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
        if (fl) {
            float a = getf(ops[0].dt, AT(ops[0], off[0]));
            float b = has_b ? getf(ops[1].dt, AT(ops[1], off[1])) : scalar_f(&e->s[0]);
            float r = 0;
            switch (op) {
            case OP_ADD:
                r = a + alpha_f * b;
                break;
            case OP_MUL:
                r = a * b;
                break;
            case OP_DIV:
                r = a / b;
                break;
            case OP_MAXIMUM:
                if (ignore_nan) { /* KITCHEN_SIM_MINMAX_NAN=ignore: NaN loses, as in fmaxf */
                    r = a != a ? b : b != b ? a : (a > b ? a : b);
                } else {
                    r = (a != a || b != b) ? NAN : (a > b ? a : b);
                }
                break;
            case OP_CLAMPMIN:
                r = a < b ? b : a; /* NaN stays NaN */
                break;
            case OP_FLOORDIV:
                r = floorf(a / b);
                break;
            case OP_EQ:
                puti(ops[2].dt, po, a == b);
                continue;
            case OP_GT:
                puti(ops[2].dt, po, a > b);
                continue;
            case OP_LOGAND:
                puti(ops[2].dt, po, a != 0 && b != 0);
                continue;
            default:
                snprintf(msg, msglen, "bitwise operation on floating-point data");
                return ACLNN_ERR_RUNTIME_ERROR;
            }
            putf(ops[2].dt, po, r);
        } else {
            int64_t a = geti(ops[0].dt, AT(ops[0], off[0]));
            int64_t b = has_b ? geti(ops[1].dt, AT(ops[1], off[1])) : scalar_i(&e->s[0]);
            int64_t r = 0;
            switch (op) {
            case OP_ADD:
                r = (int64_t)((uint64_t)a + (uint64_t)alpha_i * (uint64_t)b);
                break;
            case OP_MUL:
                r = (int64_t)((uint64_t)a * (uint64_t)b);
                break;
            case OP_DIV:
                putf(ops[2].dt, po, (float)a / (float)b);
                continue;
            case OP_MAXIMUM:
                r = a > b ? a : b;
                break;
            case OP_CLAMPMIN:
                r = a < b ? b : a;
                break;
            case OP_FLOORDIV:
                if (b == 0) {
                    snprintf(msg, msglen, "integer division by zero");
                    return ACLNN_ERR_RUNTIME_ERROR;
                }
                r = a / b;
                if ((a % b != 0) && ((a < 0) != (b < 0))) {
                    r--;
                }
                break;
            case OP_AND:
                r = a & b;
                break;
            case OP_XOR:
                r = a ^ b;
                break;
            case OP_EQ:
                r = a == b;
                break;
            case OP_GT:
                r = a > b;
                break;
            case OP_LOGAND:
                r = a != 0 && b != 0;
                break;
            }
            puti(ops[2].dt, po, r);
        }
    } while (iterate(out, idx, ops, off, 3));
    return 0;
}

static bool numeric(aclDataType dt) {
    return is_float(dt) || is_int(dt);
}

/* binary_phase1 builds the executor of an element-wise operator. other is a
 * tensor or NULL (then scalar is used); out NULL means in place on self. */
static aclnnStatus binary_phase1(const char *op, int kind, const aclTensor *self, const aclTensor *other,
                                 const aclScalar *scalar, const aclScalar *alpha, const aclTensor *out,
                                 uint64_t *workspaceSize, aclOpExecutor **executor) {
    REQUIRE(live_tensor(self), ACLNN_ERR_PARAM_NULLPTR, op, "self is not a live aclTensor");
    REQUIRE(other == NULL || live_tensor(other), ACLNN_ERR_PARAM_NULLPTR, op, "other is not a live aclTensor");
    REQUIRE(other != NULL || live_scalar(scalar), ACLNN_ERR_PARAM_NULLPTR, op, "other is not a live aclScalar");
    REQUIRE(alpha == NULL || live_scalar(alpha), ACLNN_ERR_PARAM_NULLPTR, op, "alpha is not a live aclScalar");
    REQUIRE(workspaceSize != NULL && executor != NULL, ACLNN_ERR_PARAM_NULLPTR, op, "NULL output pointer");
    const ksim_tensor *a = (const ksim_tensor *)self, *b = (const ksim_tensor *)other;
    const ksim_tensor *o = out ? (const ksim_tensor *)out : a;
    REQUIRE(out == NULL || live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op, "out is not a live aclTensor");
    REQUIRE(numeric(a->dtype) && (b == NULL || numeric(b->dtype)) && numeric(o->dtype), ACLNN_ERR_PARAM_INVALID, op,
            "data type not supported");
    bool fl = is_float(a->dtype) || (b ? is_float(b->dtype) : ((const ksim_scalar *)scalar)->isfloat);
    REQUIRE(!(fl && (kind == OP_AND || kind == OP_XOR)), ACLNN_ERR_PARAM_INVALID, op,
            "bitwise operators take integer or bool tensors");
    int64_t dims[KSIM_MAX_DIMS];
    int nd;
    REQUIRE(broadcast_shape(a, b, dims, &nd), ACLNN_ERR_PARAM_INVALID, op, "self and other do not broadcast");
    REQUIRE(same_shape(o, dims, nd), ACLNN_ERR_PARAM_INVALID, op,
            out ? "out does not have the broadcast shape of self and other" : "other does not broadcast to self");
    ksim_exec *e = ksim_exec_create(op, k_binary, 0);
    snap(e, 0, self);
    snap(e, 1, other);
    snap(e, 2, out ? out : self);
    if (other == NULL) {
        e->s[0] = *(const ksim_scalar *)scalar;
    }
    if (alpha != NULL) {
        e->s[1] = *(const ksim_scalar *)alpha;
    }
    e->iarg[0] = kind;
    return finish(e, workspaceSize, executor);
}

#define BINARY(Name, kind)                                                                                            \
    KSIM_API aclnnStatus aclnn##Name##GetWorkspaceSize(const aclTensor *self, const aclTensor *other,                \
                                                       aclTensor *out, uint64_t *workspaceSize,                     \
                                                       aclOpExecutor **executor) {                                  \
        FIRST_PHASE("aclnn" #Name);                                                                                   \
        return binary_phase1("aclnn" #Name, kind, self, other, NULL, NULL, out, workspaceSize, executor);             \
    }                                                                                                                 \
    SECOND_PHASE(aclnn##Name)

#define BINARY_SCALAR(Name, kind)                                                                                     \
    KSIM_API aclnnStatus aclnn##Name##GetWorkspaceSize(const aclTensor *self, const aclScalar *other,                \
                                                       aclTensor *out, uint64_t *workspaceSize,                     \
                                                       aclOpExecutor **executor) {                                  \
        FIRST_PHASE("aclnn" #Name);                                                                                   \
        return binary_phase1("aclnn" #Name, kind, self, NULL, other, NULL, out, workspaceSize, executor);             \
    }                                                                                                                 \
    SECOND_PHASE(aclnn##Name)

#define INPLACE_SCALAR(Name, kind)                                                                                    \
    KSIM_API aclnnStatus aclnn##Name##GetWorkspaceSize(aclTensor *selfRef, const aclScalar *other,                   \
                                                       uint64_t *workspaceSize, aclOpExecutor **executor) {         \
        FIRST_PHASE("aclnn" #Name);                                                                                   \
        return binary_phase1("aclnn" #Name, kind, selfRef, NULL, other, NULL, NULL, workspaceSize, executor);         \
    }                                                                                                                 \
    SECOND_PHASE(aclnn##Name)

BINARY(Mul, OP_MUL)
BINARY(Div, OP_DIV)
BINARY(Maximum, OP_MAXIMUM)
BINARY(FloorDivide, OP_FLOORDIV)
BINARY(LogicalAnd, OP_LOGAND)
BINARY_SCALAR(Muls, OP_MUL)
BINARY_SCALAR(Divs, OP_DIV)
BINARY_SCALAR(FloorDivides, OP_FLOORDIV)
BINARY_SCALAR(EqScalar, OP_EQ)
BINARY_SCALAR(GtScalar, OP_GT)
BINARY_SCALAR(ClampMin, OP_CLAMPMIN)
INPLACE_SCALAR(InplaceMuls, OP_MUL)
INPLACE_SCALAR(InplaceFloorDivides, OP_FLOORDIV)

/* aclnnInplaceBitwiseAndScalar's selfRef is const in aclnn_bitwise_and_scalar.h. */
KSIM_API aclnnStatus aclnnInplaceBitwiseAndScalarGetWorkspaceSize(const aclTensor *selfRef, const aclScalar *other,
                                                                  uint64_t *workspaceSize, aclOpExecutor **executor) {
    FIRST_PHASE("aclnnInplaceBitwiseAndScalar");
    return binary_phase1("aclnnInplaceBitwiseAndScalar", OP_AND, selfRef, NULL, other, NULL, NULL, workspaceSize,
                         executor);
}
SECOND_PHASE(aclnnInplaceBitwiseAndScalar)

KSIM_API aclnnStatus aclnnInplaceBitwiseXorTensorGetWorkspaceSize(aclTensor *selfRef, const aclTensor *other,
                                                                  uint64_t *workspaceSize, aclOpExecutor **executor) {
    FIRST_PHASE("aclnnInplaceBitwiseXorTensor");
    return binary_phase1("aclnnInplaceBitwiseXorTensor", OP_XOR, selfRef, other, NULL, NULL, NULL, workspaceSize,
                         executor);
}
SECOND_PHASE(aclnnInplaceBitwiseXorTensor)

KSIM_API aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha,
                                              aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
    FIRST_PHASE("aclnnAdd");
    REQUIRE(live_scalar(alpha), ACLNN_ERR_PARAM_NULLPTR, "aclnnAdd", "alpha is not a live aclScalar");
    return binary_phase1("aclnnAdd", OP_ADD, self, other, NULL, alpha, out, workspaceSize, executor);
}
SECOND_PHASE(aclnnAdd)

KSIM_API aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, const aclScalar *alpha,
                                               aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
    FIRST_PHASE("aclnnAdds");
    REQUIRE(live_scalar(alpha), ACLNN_ERR_PARAM_NULLPTR, "aclnnAdds", "alpha is not a live aclScalar");
    return binary_phase1("aclnnAdds", OP_ADD, self, NULL, other, alpha, out, workspaceSize, executor);
}
SECOND_PHASE(aclnnAdds)

KSIM_API aclnnStatus aclnnInplaceAddGetWorkspaceSize(const aclTensor *selfRef, const aclTensor *other,
                                                     const aclScalar *alpha, uint64_t *workspaceSize,
                                                     aclOpExecutor **executor) {
    FIRST_PHASE("aclnnInplaceAdd");
    REQUIRE(live_scalar(alpha), ACLNN_ERR_PARAM_NULLPTR, "aclnnInplaceAdd", "alpha is not a live aclScalar");
    return binary_phase1("aclnnInplaceAdd", OP_ADD, selfRef, other, NULL, alpha, NULL, workspaceSize, executor);
}
SECOND_PHASE(aclnnInplaceAdd)

KSIM_API aclnnStatus aclnnInplaceAddsGetWorkspaceSize(const aclTensor *selfRef, const aclScalar *other,
                                                      const aclScalar *alpha, uint64_t *workspaceSize,
                                                      aclOpExecutor **executor) {
    FIRST_PHASE("aclnnInplaceAdds");
    REQUIRE(live_scalar(alpha), ACLNN_ERR_PARAM_NULLPTR, "aclnnInplaceAdds", "alpha is not a live aclScalar");
    return binary_phase1("aclnnInplaceAdds", OP_ADD, selfRef, NULL, other, alpha, NULL, workspaceSize, executor);
}
SECOND_PHASE(aclnnInplaceAdds)

/* ---- aclnnPowScalarTensor ---- */

static int k_pow_st(ksim_exec *e, char *msg, size_t msglen) {
    (void)msg, (void)msglen;
    const ksim_tensor *out = &e->t[2];
    operand ops[2];
    operand_init(&ops[0], &e->t[1], e->host[1], out);
    operand_init(&ops[1], out, e->host[2], out);
    bool fl = e->s[0].isfloat || is_float(e->t[1].dtype);
    int64_t idx[KSIM_MAX_DIMS] = {0}, off[2] = {0};
    if (numel(out) == 0) {
        return 0;
    }
    do {
        unsigned char *po = AT(ops[1], off[1]);
        if (fl) {
            putf(ops[1].dt, po, powf(scalar_f(&e->s[0]), getf(ops[0].dt, AT(ops[0], off[0]))));
        } else {
            int64_t base = scalar_i(&e->s[0]), x = geti(ops[0].dt, AT(ops[0], off[0])), r = 1;
            if (x < 0) {
                r = base == 1 ? 1 : base == -1 ? (x % 2 ? -1 : 1) : 0;
            }
            for (int64_t i = 0; i < x && i < 64; i++) {
                r = (int64_t)((uint64_t)r * (uint64_t)base);
            }
            puti(ops[1].dt, po, r);
        }
    } while (iterate(out, idx, ops, off, 2));
    return 0;
}

KSIM_API aclnnStatus aclnnPowScalarTensorGetWorkspaceSize(const aclScalar *self, const aclTensor *exponent,
                                                          const aclTensor *out, uint64_t *workspaceSize,
                                                          aclOpExecutor **executor) {
    const char *op = "aclnnPowScalarTensor";
    FIRST_PHASE("aclnnPowScalarTensor");
    REQUIRE(live_scalar(self), ACLNN_ERR_PARAM_NULLPTR, op, "self is not a live aclScalar");
    REQUIRE(live_tensor(exponent) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op, "exponent and out must be live");
    const ksim_tensor *x = (const ksim_tensor *)exponent, *o = (const ksim_tensor *)out;
    REQUIRE(numeric(x->dtype) && numeric(o->dtype), ACLNN_ERR_PARAM_INVALID, op, "data type not supported");
    REQUIRE(same_shape(o, x->dims, (int)x->ndim), ACLNN_ERR_PARAM_INVALID, op, "out must have exponent's shape");
    ksim_exec *e = ksim_exec_create(op, k_pow_st, 0);
    e->s[0] = *(const ksim_scalar *)self;
    snap(e, 1, exponent);
    snap(e, 2, out);
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnPowScalarTensor)

/* ---- unary operators ---- */

enum { U_CAST, U_ABS, U_FLOOR, U_ISFINITE, U_NOT, U_CLAMP, U_FILL, U_MASKED_FILL, U_COPY, U_EXP };

/* k_unary: t[0] input (absent for fill), t[1] mask (masked fill), t[2] out;
 * s[0], s[1] scalars; iarg[0] the operation. */
static int k_unary(ksim_exec *e, char *msg, size_t msglen) {
    (void)msg, (void)msglen;
    int op = (int)e->iarg[0];
    const ksim_tensor *out = &e->t[2];
    operand ops[3];
    memset(ops, 0, sizeof ops);
    if (e->t[0].magic) {
        operand_init(&ops[0], &e->t[0], e->host[0], out);
    }
    if (e->t[1].magic) {
        operand_init(&ops[1], &e->t[1], e->host[1], out);
    }
    operand_init(&ops[2], out, e->host[2], out);
    int64_t idx[KSIM_MAX_DIMS] = {0}, off[3] = {0};
    if (numel(out) == 0) {
        return 0;
    }
    do {
        unsigned char *po = AT(ops[2], off[2]);
        const unsigned char *pa = e->t[0].magic ? AT(ops[0], off[0]) : NULL;
        switch (op) {
        case U_CAST:
        case U_COPY:
            if (ops[0].dt == ACL_DOUBLE || ops[2].dt == ACL_DOUBLE) {
                putd(ops[2].dt, po, getd(ops[0].dt, pa));
            } else if (is_float(ops[0].dt)) {
                putf(ops[2].dt, po, getf(ops[0].dt, pa));
            } else {
                puti(ops[2].dt, po, geti(ops[0].dt, pa));
            }
            break;
        case U_ABS:
            if (is_float(ops[0].dt)) {
                putf(ops[2].dt, po, fabsf(getf(ops[0].dt, pa)));
            } else {
                int64_t v = geti(ops[0].dt, pa);
                puti(ops[2].dt, po, v < 0 ? -v : v);
            }
            break;
        case U_FLOOR:
            putf(ops[2].dt, po, floorf(getf(ops[0].dt, pa)));
            break;
        case U_EXP:
            /* The C library's exp and expf, within an ulp of e^x: CANN
             * documents no accuracy (README.md). */
            if (ops[0].dt == ACL_DOUBLE) {
                putd(ops[2].dt, po, exp(getd(ops[0].dt, pa)));
            } else {
                putf(ops[2].dt, po, expf(getf(ops[0].dt, pa)));
            }
            break;
        case U_ISFINITE:
            puti(ops[2].dt, po, is_float(ops[0].dt) ? isfinite(getf(ops[0].dt, pa)) != 0 : 1);
            break;
        case U_NOT:
            puti(ops[2].dt, po, is_float(ops[0].dt) ? getf(ops[0].dt, pa) == 0 : geti(ops[0].dt, pa) == 0);
            break;
        case U_CLAMP:
            if (is_float(ops[0].dt)) {
                float v = getf(ops[0].dt, pa);
                if (e->s[0].magic && v < scalar_f(&e->s[0])) {
                    v = scalar_f(&e->s[0]);
                }
                if (e->s[1].magic && v > scalar_f(&e->s[1])) {
                    v = scalar_f(&e->s[1]);
                }
                putf(ops[2].dt, po, v);
            } else {
                int64_t v = geti(ops[0].dt, pa);
                if (e->s[0].magic && v < scalar_i(&e->s[0])) {
                    v = scalar_i(&e->s[0]);
                }
                if (e->s[1].magic && v > scalar_i(&e->s[1])) {
                    v = scalar_i(&e->s[1]);
                }
                puti(ops[2].dt, po, v);
            }
            break;
        case U_MASKED_FILL:
            if (!geti(ops[1].dt, AT(ops[1], off[1]))) {
                break;
            }
            /* fall through */
        case U_FILL:
            if (e->s[0].isfloat) {
                putf(ops[2].dt, po, (float)e->s[0].f);
            } else {
                puti(ops[2].dt, po, e->s[0].i);
            }
            break;
        }
    } while (iterate(out, idx, ops, off, 3));
    return 0;
}

static aclnnStatus unary_phase1(const char *op, int kind, const aclTensor *self, aclTensor *out,
                                uint64_t *workspaceSize, aclOpExecutor **executor) {
    REQUIRE(live_tensor(self) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op, "self and out must be live aclTensors");
    REQUIRE(workspaceSize != NULL && executor != NULL, ACLNN_ERR_PARAM_NULLPTR, op, "NULL output pointer");
    const ksim_tensor *a = (const ksim_tensor *)self, *o = (const ksim_tensor *)out;
    REQUIRE(numeric(a->dtype) && numeric(o->dtype), ACLNN_ERR_PARAM_INVALID, op, "data type not supported");
    REQUIRE((kind != U_FLOOR && kind != U_EXP) || is_float(a->dtype), ACLNN_ERR_PARAM_INVALID, op,
            "self must be a floating-point tensor");
    REQUIRE(kind != U_ISFINITE || o->dtype == ACL_BOOL, ACLNN_ERR_PARAM_INVALID, op, "out must be bool");
    REQUIRE(same_shape(o, a->dims, (int)a->ndim), ACLNN_ERR_PARAM_INVALID, op, "out must have self's shape");
    ksim_exec *e = ksim_exec_create(op, k_unary, 0);
    snap(e, 0, self);
    snap(e, 2, out);
    e->iarg[0] = kind;
    return finish(e, workspaceSize, executor);
}

KSIM_API aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype, aclTensor *out,
                                               uint64_t *workspaceSize, aclOpExecutor **executor) {
    FIRST_PHASE("aclnnCast");
    REQUIRE(out == NULL || !live_tensor(out) || ((const ksim_tensor *)out)->dtype == dtype, ACLNN_ERR_PARAM_INVALID,
            "aclnnCast", "out's data type differs from dtype");
    return unary_phase1("aclnnCast", U_CAST, self, out, workspaceSize, executor);
}
SECOND_PHASE(aclnnCast)

#define UNARY(Name, kind)                                                                                             \
    KSIM_API aclnnStatus aclnn##Name##GetWorkspaceSize(const aclTensor *self, aclTensor *out,                        \
                                                       uint64_t *workspaceSize, aclOpExecutor **executor) {         \
        FIRST_PHASE("aclnn" #Name);                                                                                   \
        return unary_phase1("aclnn" #Name, kind, self, out, workspaceSize, executor);                                 \
    }                                                                                                                 \
    SECOND_PHASE(aclnn##Name)

UNARY(Abs, U_ABS)
UNARY(Floor, U_FLOOR)
UNARY(IsFinite, U_ISFINITE)
UNARY(LogicalNot, U_NOT)
UNARY(Exp, U_EXP)

/* ---- aclnnIndexSelect ---- */

/* k_index_select: t[0] self, t[1] index (0-D or 1-D, int32 or int64), t[2]
 * out; iarg[0] the dimension. out[.., i, ..] = self[.., index[i], ..]. An
 * index outside [0, size of the dimension) fails when the kernel runs
 * (guess: aclnn_index_select.h documents no check, and the GatherV2 kernel
 * behind it would read outside self; callers must check first). */
static int k_index_select(ksim_exec *e, char *msg, size_t msglen) {
    const ksim_tensor *x = &e->t[0], *ix = &e->t[1], *out = &e->t[2];
    int dim = (int)e->iarg[0];
    size_t es = ksim_dtype_size(x->dtype), ies = ksim_dtype_size(ix->dtype);
    int64_t n = numel(ix), istride = ix->ndim ? ix->strides[0] : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = geti(ix->dtype, e->host[1] + (size_t)(i * istride) * ies);
        if (v < 0 || v >= x->dims[dim]) {
            snprintf(msg, msglen, "index %lld at position %lld is out of range for dimension %d of size %lld",
                     (long long)v, (long long)i, dim, (long long)x->dims[dim]);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    if (numel(out) == 0) {
        return 0;
    }
    int64_t idx[KSIM_MAX_DIMS] = {0};
    do {
        int64_t xo = 0, oo = 0;
        for (int d = 0; d < (int)out->ndim; d++) {
            int64_t j = idx[d];
            if (d == dim) {
                j = geti(ix->dtype, e->host[1] + (size_t)(j * istride) * ies);
            }
            xo += j * x->strides[d];
            oo += idx[d] * out->strides[d];
        }
        memcpy(e->host[2] + (size_t)oo * es, e->host[0] + (size_t)xo * es, es);
    } while (iterate(out, idx, NULL, NULL, 0));
    return 0;
}

KSIM_API aclnnStatus aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                                      aclTensor *out, uint64_t *workspaceSize,
                                                      aclOpExecutor **executor) {
    const char *op = "aclnnIndexSelect";
    FIRST_PHASE("aclnnIndexSelect");
    REQUIRE(live_tensor(self) && live_tensor(index) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op,
            "self, index and out must be live aclTensors");
    REQUIRE(workspaceSize != NULL && executor != NULL, ACLNN_ERR_PARAM_NULLPTR, op, "NULL output pointer");
    const ksim_tensor *x = (const ksim_tensor *)self, *ix = (const ksim_tensor *)index, *o = (const ksim_tensor *)out;
    REQUIRE(numeric(x->dtype), ACLNN_ERR_PARAM_INVALID, op, "self's data type is not supported");
    REQUIRE(ix->dtype == ACL_INT32 || ix->dtype == ACL_INT64, ACLNN_ERR_PARAM_INVALID, op,
            "index must be int32 or int64");
    REQUIRE(ix->ndim <= 1, ACLNN_ERR_PARAM_INVALID, op, "index must be 0-D or 1-D");
    REQUIRE(x->ndim >= 1, ACLNN_ERR_PARAM_INVALID, op, "self must have a dimension");
    if (dim < 0) {
        dim += (int64_t)x->ndim;
    }
    REQUIRE(dim >= 0 && dim < (int64_t)x->ndim, ACLNN_ERR_PARAM_INVALID, op, "dim is out of range");
    REQUIRE(o->dtype == x->dtype, ACLNN_ERR_PARAM_INVALID, op, "out's data type differs from self's");
    int64_t dims[KSIM_MAX_DIMS];
    for (uint64_t d = 0; d < x->ndim; d++) {
        dims[d] = (int64_t)d == dim ? numel(ix) : x->dims[d];
    }
    REQUIRE(same_shape(o, dims, (int)x->ndim), ACLNN_ERR_PARAM_INVALID, op,
            "out must have self's shape with index's length in dimension dim");
    ksim_exec *e = ksim_exec_create(op, k_index_select, 1024);
    snap(e, 0, self);
    snap(e, 1, index);
    snap(e, 2, out);
    e->iarg[0] = dim;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnIndexSelect)

KSIM_API aclnnStatus aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin,
                                                const aclScalar *clipValueMax, aclTensor *out,
                                                uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnClamp";
    FIRST_PHASE("aclnnClamp");
    REQUIRE(clipValueMin == NULL || live_scalar(clipValueMin), ACLNN_ERR_PARAM_NULLPTR, op, "min is not live");
    REQUIRE(clipValueMax == NULL || live_scalar(clipValueMax), ACLNN_ERR_PARAM_NULLPTR, op, "max is not live");
    REQUIRE(clipValueMin != NULL || clipValueMax != NULL, ACLNN_ERR_PARAM_NULLPTR, op, "min and max are both NULL");
    aclnnStatus st = unary_phase1(op, U_CLAMP, self, out, workspaceSize, executor);
    if (st == 0) {
        ksim_exec *e = (ksim_exec *)*executor;
        if (clipValueMin) {
            e->s[0] = *(const ksim_scalar *)clipValueMin;
        }
        if (clipValueMax) {
            e->s[1] = *(const ksim_scalar *)clipValueMax;
        }
    }
    return st;
}
SECOND_PHASE(aclnnClamp)

KSIM_API aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclScalar *value,
                                                            uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnInplaceFillScalar";
    FIRST_PHASE("aclnnInplaceFillScalar");
    REQUIRE(live_tensor(selfRef) && live_scalar(value), ACLNN_ERR_PARAM_NULLPTR, op, "selfRef and value must be live");
    REQUIRE(numeric(((const ksim_tensor *)selfRef)->dtype), ACLNN_ERR_PARAM_INVALID, op, "data type not supported");
    ksim_exec *e = ksim_exec_create(op, k_unary, 0);
    snap(e, 2, selfRef);
    e->s[0] = *(const ksim_scalar *)value;
    e->iarg[0] = U_FILL;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnInplaceFillScalar)

KSIM_API aclnnStatus aclnnInplaceMaskedFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclTensor *mask,
                                                                  const aclScalar *value, uint64_t *workspaceSize,
                                                                  aclOpExecutor **executor) {
    const char *op = "aclnnInplaceMaskedFillScalar";
    FIRST_PHASE("aclnnInplaceMaskedFillScalar");
    REQUIRE(live_tensor(selfRef) && live_tensor(mask) && live_scalar(value), ACLNN_ERR_PARAM_NULLPTR, op,
            "selfRef, mask and value must be live");
    const ksim_tensor *s = (const ksim_tensor *)selfRef, *m = (const ksim_tensor *)mask;
    REQUIRE(m->dtype == ACL_BOOL, ACLNN_ERR_PARAM_INVALID, op, "mask must be bool");
    REQUIRE(broadcasts(m, s->dims, (int)s->ndim), ACLNN_ERR_PARAM_INVALID, op, "mask does not broadcast to selfRef");
    ksim_exec *e = ksim_exec_create(op, k_unary, 0);
    snap(e, 1, mask);
    snap(e, 2, selfRef);
    e->s[0] = *(const ksim_scalar *)value;
    e->iarg[0] = U_MASKED_FILL;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnInplaceMaskedFillScalar)

KSIM_API aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
                                                      uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnInplaceCopy";
    FIRST_PHASE("aclnnInplaceCopy");
    REQUIRE(live_tensor(selfRef) && live_tensor(src), ACLNN_ERR_PARAM_NULLPTR, op, "selfRef and src must be live");
    const ksim_tensor *s = (const ksim_tensor *)selfRef, *x = (const ksim_tensor *)src;
    REQUIRE(broadcasts(x, s->dims, (int)s->ndim), ACLNN_ERR_PARAM_INVALID, op, "src does not broadcast to selfRef");
    ksim_exec *e = ksim_exec_create(op, k_unary, 0);
    snap(e, 0, src);
    snap(e, 2, selfRef);
    e->iarg[0] = U_COPY;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnInplaceCopy)

/* ---- aclnnArange ---- */

static int k_arange(ksim_exec *e, char *msg, size_t msglen) {
    (void)msg, (void)msglen;
    const ksim_tensor *out = &e->t[2];
    operand o;
    operand_init(&o, out, e->host[2], out);
    int64_t n = numel(out);
    for (int64_t i = 0; i < n; i++) {
        unsigned char *p = AT(o, i * out->strides[0]);
        if (is_float(out->dtype)) {
            putf(out->dtype, p, (float)(e->s[0].f + (double)i * e->s[2].f));
        } else {
            puti(out->dtype, p, scalar_i(&e->s[0]) + i * scalar_i(&e->s[2]));
        }
    }
    return 0;
}

KSIM_API aclnnStatus aclnnArangeGetWorkspaceSize(const aclScalar *start, const aclScalar *end, const aclScalar *step,
                                                 aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnArange";
    FIRST_PHASE("aclnnArange");
    REQUIRE(live_scalar(start) && live_scalar(end) && live_scalar(step) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR,
            op, "start, end, step and out must be live");
    const ksim_scalar *a = (const ksim_scalar *)start, *b = (const ksim_scalar *)end, *s = (const ksim_scalar *)step;
    const ksim_tensor *o = (const ksim_tensor *)out;
    REQUIRE(o->ndim == 1, ACLNN_ERR_PARAM_INVALID, op, "out must be 1-D");
    REQUIRE(is_float(o->dtype) || o->dtype == ACL_INT64 || o->dtype == ACL_INT32, ACLNN_ERR_PARAM_INVALID, op,
            "out must be float, int32 or int64");
    double fa = a->isfloat ? a->f : (double)a->i, fb = b->isfloat ? b->f : (double)b->i;
    double fs = s->isfloat ? s->f : (double)s->i;
    REQUIRE(fs != 0, ACLNN_ERR_PARAM_INVALID, op, "step is zero");
    double want = ceil((fb - fa) / fs);
    REQUIRE(want >= 0 && (double)o->dims[0] == want, ACLNN_ERR_PARAM_INVALID, op,
            "out's size is not ceil((end - start) / step)");
    ksim_exec *e = ksim_exec_create(op, k_arange, 0);
    e->s[0] = *a;
    e->s[1] = *b;
    e->s[2] = *s;
    if (is_float(o->dtype)) {
        e->s[0].f = fa;
        e->s[2].f = fs;
    }
    snap(e, 2, out);
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnArange)

/* ---- reductions: aclnnAmin, aclnnAminmaxDim, aclnnAll ---- */

enum { R_MIN, R_MAX, R_ALL };

/* reduce_into reduces x (host data xh) over the dimensions in mask into
 * out (host data oh): the minimum (R_MIN) or the maximum (R_MAX) of each
 * slice, NaN for a slice holding NaN, as torch.amax/amin define them (with
 * KITCHEN_SIM_MINMAX_NAN=ignore, NaN is skipped, as fmaxf and fminf do, and
 * only an all-NaN slice gives NaN); or whether every element of the slice
 * is non-zero (R_ALL, NaN counting as non-zero). */
static int reduce_into(const ksim_tensor *x, const unsigned char *xh, const ksim_tensor *out, unsigned char *oh,
                       int kind, int64_t mask, char *msg, size_t msglen) {
    int64_t n = numel(x), m = numel(out);
    if (n == 0) {
        snprintf(msg, msglen, "reduction of an empty tensor");
        return ACLNN_ERR_RUNTIME_ERROR;
    }
    bool is_max = kind == R_MAX, fl = is_float(x->dtype) && kind != R_ALL;
    bool ignore_nan = ksim_minmax_ignores_nan();
    float *accf = calloc((size_t)m, sizeof *accf);
    int64_t *acci = calloc((size_t)m, sizeof *acci);
    bool *seen = calloc((size_t)m, sizeof *seen);
    size_t es = ksim_dtype_size(x->dtype);
    int64_t idx[KSIM_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0, o = 0;
        for (uint64_t d = 0; d < x->ndim; d++) {
            off += idx[d] * x->strides[d];
            if (!(mask >> d & 1)) {
                o = o * x->dims[d] + idx[d];
            }
        }
        const unsigned char *p = xh + (size_t)off * es;
        if (kind == R_ALL) {
            bool nz = is_float(x->dtype) ? getf(x->dtype, p) != 0 : geti(x->dtype, p) != 0;
            acci[o] = (seen[o] ? acci[o] : 1) && nz;
        } else if (fl) {
            float v = getf(x->dtype, p);
            float a = accf[o];
            bool take = ignore_nan ? (a != a || (v == v && (is_max ? v > a : v < a)))
                                   : (v != v || (a == a && (is_max ? v > a : v < a)));
            if (!seen[o] || take) {
                accf[o] = v;
            }
        } else {
            int64_t v = geti(x->dtype, p);
            if (!seen[o] || (is_max ? v > acci[o] : v < acci[o])) {
                acci[o] = v;
            }
        }
        seen[o] = true;
        for (int d = (int)x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->dims[d]) {
                break;
            }
            idx[d] = 0;
        }
    }
    /* Write out in row-major order of its own shape (the kept dimensions). */
    size_t oes = ksim_dtype_size(out->dtype);
    int64_t oidx[KSIM_MAX_DIMS] = {0};
    for (int64_t o = 0; o < m; o++) {
        int64_t off = 0;
        for (uint64_t d = 0; d < out->ndim; d++) {
            off += oidx[d] * out->strides[d];
        }
        unsigned char *p = oh + (size_t)off * oes;
        if (fl) {
            putf(out->dtype, p, accf[o]);
        } else {
            puti(out->dtype, p, acci[o]);
        }
        for (int d = (int)out->ndim - 1; d >= 0; d--) {
            if (++oidx[d] < out->dims[d]) {
                break;
            }
            oidx[d] = 0;
        }
    }
    free(accf);
    free(acci);
    free(seen);
    return 0;
}

/* k_amin: t[0] self, t[2] out; iarg[1] the reduced dimensions' bit mask. */
static int k_amin(ksim_exec *e, char *msg, size_t msglen) {
    return reduce_into(&e->t[0], e->host[0], &e->t[2], e->host[2], R_MIN, e->iarg[1], msg, msglen);
}

/* k_all: t[0] self, t[2] out; iarg[1] the reduced dimensions' bit mask. */
static int k_all(ksim_exec *e, char *msg, size_t msglen) {
    return reduce_into(&e->t[0], e->host[0], &e->t[2], e->host[2], R_ALL, e->iarg[1], msg, msglen);
}

/* k_aminmax: t[0] self, t[1] minOut, t[2] maxOut; iarg[1] the mask. */
static int k_aminmax(ksim_exec *e, char *msg, size_t msglen) {
    int rc = reduce_into(&e->t[0], e->host[0], &e->t[1], e->host[1], R_MIN, e->iarg[1], msg, msglen);
    return rc ? rc : reduce_into(&e->t[0], e->host[0], &e->t[2], e->host[2], R_MAX, e->iarg[1], msg, msglen);
}

/* reduced_shape checks the reduction of x over dims (all of them if n is 0)
 * into out, which must have x's data type unless bool_out (then BOOL or
 * UINT8), and returns the bit mask of the reduced dimensions or -1. */
static int64_t reduced_shape(const char *op, const ksim_tensor *x, const int64_t *dims, uint64_t n, bool keepDim,
                             const ksim_tensor *out, bool bool_out) {
    int64_t mask = 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t d = dims[i] < 0 ? dims[i] + (int64_t)x->ndim : dims[i];
        if (d < 0 || d >= (int64_t)x->ndim) {
            bad(ACLNN_ERR_PARAM_INVALID, op, "%s", "dim out of range");
            return -1;
        }
        mask |= (int64_t)1 << d;
    }
    if (n == 0) {
        mask = ((int64_t)1 << x->ndim) - 1;
    }
    int64_t shape[KSIM_MAX_DIMS];
    int nd = 0;
    for (uint64_t d = 0; d < x->ndim; d++) {
        if (mask >> d & 1) {
            if (keepDim) {
                shape[nd++] = 1;
            }
        } else {
            shape[nd++] = x->dims[d];
        }
    }
    if (!same_shape(out, shape, nd)) {
        bad(ACLNN_ERR_PARAM_INVALID, op, "%s", "out must have the reduced shape");
        return -1;
    }
    if (bool_out ? (out->dtype != ACL_BOOL && out->dtype != ACL_UINT8) : out->dtype != x->dtype) {
        bad(ACLNN_ERR_PARAM_INVALID, op, "%s", bool_out ? "out must be BOOL or UINT8" : "out must have self's data type");
        return -1;
    }
    if (numel(x) == 0) {
        bad(ACLNN_ERR_PARAM_INVALID, op, "%s", "self is empty");
        return -1;
    }
    return mask;
}

KSIM_API aclnnStatus aclnnAminGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim,
                                               aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnAmin";
    FIRST_PHASE("aclnnAmin");
    REQUIRE(live_tensor(self) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op, "self and out must be live aclTensors");
    REQUIRE(dim != NULL && ksim_intarray_live((const ksim_intarray *)dim), ACLNN_ERR_PARAM_NULLPTR, op,
            "dim is not a live aclIntArray");
    const ksim_tensor *x = (const ksim_tensor *)self;
    REQUIRE(numeric(x->dtype) && x->dtype != ACL_BOOL, ACLNN_ERR_PARAM_INVALID, op, "data type not supported");
    const ksim_intarray *ds = (const ksim_intarray *)dim;
    int64_t mask = reduced_shape(op, x, ds->v, ds->n, keepDim, (const ksim_tensor *)out, false);
    if (mask < 0) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    ksim_exec *e = ksim_exec_create(op, k_amin, 1024);
    snap(e, 0, self);
    snap(e, 2, out);
    e->iarg[1] = mask;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnAmin)

KSIM_API aclnnStatus aclnnAminmaxDimGetWorkspaceSize(const aclTensor *self, const int64_t dim, bool keepDim,
                                                     aclTensor *minOut, aclTensor *maxOut, uint64_t *workspaceSize,
                                                     aclOpExecutor **executor) {
    const char *op = "aclnnAminmaxDim";
    FIRST_PHASE("aclnnAminmaxDim");
    REQUIRE(live_tensor(self) && live_tensor(minOut) && live_tensor(maxOut), ACLNN_ERR_PARAM_NULLPTR, op,
            "self, minOut and maxOut must be live aclTensors");
    const ksim_tensor *x = (const ksim_tensor *)self;
    REQUIRE(numeric(x->dtype) && x->dtype != ACL_BOOL, ACLNN_ERR_PARAM_INVALID, op, "data type not supported");
    int64_t mask = reduced_shape(op, x, &dim, 1, keepDim, (const ksim_tensor *)minOut, false);
    if (mask < 0 || reduced_shape(op, x, &dim, 1, keepDim, (const ksim_tensor *)maxOut, false) < 0) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    ksim_exec *e = ksim_exec_create(op, k_aminmax, 1024);
    snap(e, 0, self);
    snap(e, 1, minOut);
    snap(e, 2, maxOut);
    e->iarg[1] = mask;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnAminmaxDim)

KSIM_API aclnnStatus aclnnAllGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepdim,
                                              aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnAll";
    FIRST_PHASE("aclnnAll");
    REQUIRE(live_tensor(self) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op, "self and out must be live aclTensors");
    REQUIRE(dim != NULL && ksim_intarray_live((const ksim_intarray *)dim), ACLNN_ERR_PARAM_NULLPTR, op,
            "dim is not a live aclIntArray");
    const ksim_tensor *x = (const ksim_tensor *)self;
    REQUIRE(numeric(x->dtype), ACLNN_ERR_PARAM_INVALID, op, "data type not supported");
    const ksim_intarray *ds = (const ksim_intarray *)dim;
    int64_t mask = reduced_shape(op, x, ds->v, ds->n, keepdim, (const ksim_tensor *)out, true);
    if (mask < 0) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    ksim_exec *e = ksim_exec_create(op, k_all, 1024);
    snap(e, 0, self);
    snap(e, 2, out);
    e->iarg[1] = mask;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnAll)

/* ---- quantization ---- */

/* row_offset returns the element offset of (row r, column k) of t, where rows
 * run over all dimensions but the last in row-major order. */
static int64_t row_offset(const ksim_tensor *t, int64_t r, int64_t k) {
    int64_t off = k * t->strides[t->ndim - 1];
    for (int d = (int)t->ndim - 2; d >= 0; d--) {
        off += (r % t->dims[d]) * t->strides[d];
        r /= t->dims[d];
    }
    return off;
}

/* rint_int8 is the rounding of aclnnQuantize and aclnnDynamicQuantV2 to
 * int8: to the nearest integer, ties to even, then converted as float_to_int
 * converts, without clipping: the 8.1.RC1 Quantize kernel
 * (impl/dynamic/quantize.py) clips the quotient only for a uint8 output, and
 * rounds and casts to int8 with nothing in between, so a quotient beyond
 * the int8 range wraps here (127.5 rounds to 128 and gives -128). NaN gives 0,
 * or what KITCHEN_SIM_NAN_TO_INT says, saturated to int8 (not documented for
 * these kernels; see README.md). */
static int8_t rint_int8(float y) {
    if (y != y) {
        int64_t v = ksim_nan_to_int();
        return v >= 127 ? 127 : v <= -128 ? -128 : (int8_t)v;
    }
    return (int8_t)float_to_int(ACL_INT8, rintf(y));
}

/* k_dynamic_quant is the symmetric int8 path of DynamicQuantV2 as the Atlas
 * A2 (910B) kernel computes it (DynamicQuantDbOpt in hicann/ops-nn,
 * quant/dynamic_quant/op_kernel/dynamic_quant_db.h): per row, the abs-max a
 * in float32 (NaN if the row holds NaN, unless KITCHEN_SIM_MINMAX_NAN=ignore),
 * the reciprocal r = 127 / a, y = f32(x) * r, rounded half to even and
 * converted to int8 without clipping (rint_int8; the 8.1.RC1 kernel
 * impl/ascendc/dynamic_quant/dynamic_quant_db.h casts float32 to int32 with
 * CAST_RINT, then to half and to int8, with no clip, and |y| <= 127 within
 * float32 rounding by construction); scaleOut = 1 / r, as the 8.1 tilings
 * compute it. t[0] x, t[1] yOut, t[2] scaleOut. */
static int k_dynamic_quant(ksim_exec *e, char *msg, size_t msglen) {
    (void)msg, (void)msglen;
    const ksim_tensor *x = &e->t[0], *y = &e->t[1], *s = &e->t[2];
    int64_t k = x->dims[x->ndim - 1], rows = numel(x) / (k ? k : 1);
    size_t xes = ksim_dtype_size(x->dtype);
    int64_t sidx[KSIM_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        float a = 0;
        bool nan = false;
        for (int64_t j = 0; j < k; j++) {
            float v = fabsf(getf(x->dtype, e->host[0] + (size_t)row_offset(x, r, j) * xes));
            nan = nan || v != v;
            a = v > a ? v : a;
        }
        if (nan && !ksim_minmax_ignores_nan()) {
            a = NAN;
        }
        float recip = 127.0f / a;
        for (int64_t j = 0; j < k; j++) {
            float v = getf(x->dtype, e->host[0] + (size_t)row_offset(x, r, j) * xes);
            e->host[1][row_offset(y, r, j)] = (unsigned char)rint_int8(v * recip);
        }
        int64_t off = 0;
        for (uint64_t d = 0; d < s->ndim; d++) {
            off += sidx[d] * s->strides[d];
        }
        putf(ACL_FLOAT, e->host[2] + (size_t)off * 4, 1.0f / recip);
        for (int d = (int)s->ndim - 1; d >= 0; d--) {
            if (++sidx[d] < s->dims[d]) {
                break;
            }
            sidx[d] = 0;
        }
    }
    return 0;
}

KSIM_API aclnnStatus aclnnDynamicQuantV2GetWorkspaceSize(const aclTensor *x, const aclTensor *smoothScalesOptional,
                                                         const aclTensor *groupIndexOptional, int64_t dstType,
                                                         const aclTensor *yOut, const aclTensor *scaleOut,
                                                         const aclTensor *offsetOut, uint64_t *workspaceSize,
                                                         aclOpExecutor **executor) {
    const char *op = "aclnnDynamicQuantV2";
    FIRST_PHASE("aclnnDynamicQuantV2");
    REQUIRE(live_tensor(x) && live_tensor(yOut) && live_tensor(scaleOut), ACLNN_ERR_PARAM_NULLPTR, op,
            "x, yOut and scaleOut must be live aclTensors");
    REQUIRE(smoothScalesOptional == NULL && groupIndexOptional == NULL, ACLNN_ERR_PARAM_INVALID, op,
            "smoothScalesOptional and groupIndexOptional are not simulated");
    REQUIRE(offsetOut == NULL, ACLNN_ERR_PARAM_INVALID, op,
            "asymmetric quantization (offsetOut) is not simulated");
    const ksim_tensor *tx = (const ksim_tensor *)x, *ty = (const ksim_tensor *)yOut, *ts = (const ksim_tensor *)scaleOut;
    REQUIRE(tx->dtype == ACL_FLOAT16 || tx->dtype == ACL_BF16, ACLNN_ERR_PARAM_INVALID, op,
            "x must be FLOAT16 or BFLOAT16");
    REQUIRE(tx->ndim > 1 && tx->ndim < 9, ACLNN_ERR_PARAM_INVALID, op, "x must have 2 to 8 dimensions");
    REQUIRE(dstType == ACL_INT8, ACLNN_ERR_PARAM_INVALID, op, "only dstType 2 (INT8) is simulated");
    REQUIRE(ty->dtype == ACL_INT8 && same_shape(ty, tx->dims, (int)tx->ndim), ACLNN_ERR_PARAM_INVALID, op,
            "yOut must be INT8 with x's shape");
    REQUIRE(ts->dtype == ACL_FLOAT && same_shape(ts, tx->dims, (int)tx->ndim - 1), ACLNN_ERR_PARAM_INVALID, op,
            "scaleOut must be FLOAT with x's shape less the last dimension");
    ksim_exec *e = ksim_exec_create(op, k_dynamic_quant, 2048);
    snap(e, 0, x);
    snap(e, 1, yOut);
    snap(e, 2, scaleOut);
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnDynamicQuantV2)

/* k_quantize: out = round_half_even(f32(x) / f32(scales[axis])) converted to
 * int8 without clipping (rint_int8), as the 8.1.RC1 kernel
 * (impl/dynamic/quantize.py: both operands cast to float32, divided, rounded,
 * cast to int8) and quantize_golden in hicann/ops-nn quant/quantize compute
 * it (float32 division, no rounding of the quotient to x's type). t[0] x,
 * t[1] scales, t[2] out; iarg[0] the axis (>= 0). */
static int k_quantize(ksim_exec *e, char *msg, size_t msglen) {
    (void)msg, (void)msglen;
    const ksim_tensor *x = &e->t[0], *sc = &e->t[1], *out = &e->t[2];
    int axis = (int)e->iarg[0];
    bool per_tensor = sc->dims[0] == 1;
    size_t xes = ksim_dtype_size(x->dtype), ses = ksim_dtype_size(sc->dtype);
    int64_t n = numel(x);
    int64_t idx[KSIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t xo = 0, oo = 0;
        for (uint64_t d = 0; d < x->ndim; d++) {
            xo += idx[d] * x->strides[d];
            oo += idx[d] * out->strides[d];
        }
        int64_t si = per_tensor ? 0 : idx[axis];
        float s = getf(sc->dtype, e->host[1] + (size_t)(si * sc->strides[0]) * ses);
        float v = getf(x->dtype, e->host[0] + (size_t)xo * xes);
        e->host[2][oo] = (unsigned char)rint_int8(v / s);
        for (int d = (int)x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->dims[d]) {
                break;
            }
            idx[d] = 0;
        }
    }
    return 0;
}

KSIM_API aclnnStatus aclnnQuantizeGetWorkspaceSize(const aclTensor *x, const aclTensor *scales,
                                                   const aclTensor *zeroPoints, aclDataType dtype, int32_t axis,
                                                   aclTensor *out, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor) {
    const char *op = "aclnnQuantize";
    FIRST_PHASE("aclnnQuantize");
    REQUIRE(live_tensor(x) && live_tensor(scales) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op,
            "x, scales and out must be live aclTensors");
    REQUIRE(zeroPoints == NULL, ACLNN_ERR_PARAM_INVALID, op, "zeroPoints are not simulated");
    const ksim_tensor *tx = (const ksim_tensor *)x, *ts = (const ksim_tensor *)scales, *to = (const ksim_tensor *)out;
    REQUIRE(is_float(tx->dtype) && tx->dtype != ACL_DOUBLE, ACLNN_ERR_PARAM_INVALID, op,
            "x must be FLOAT, FLOAT16 or BFLOAT16");
    REQUIRE(tx->dtype == ACL_FLOAT ? (ts->dtype == ACL_FLOAT) : (ts->dtype == tx->dtype), ACLNN_ERR_PARAM_INVALID, op,
            "scales must have x's data type when x is not FLOAT");
    REQUIRE(tx->ndim >= 1 && tx->ndim <= 8, ACLNN_ERR_PARAM_INVALID, op, "x must have 1 to 8 dimensions");
    REQUIRE(dtype == ACL_INT8 && to->dtype == ACL_INT8, ACLNN_ERR_PARAM_INVALID, op,
            "only dtype ACL_INT8 is simulated, and out must match it");
    REQUIRE(same_shape(to, tx->dims, (int)tx->ndim), ACLNN_ERR_PARAM_INVALID, op, "out must have x's shape");
    REQUIRE(ts->ndim == 1, ACLNN_ERR_PARAM_INVALID, op, "scales must be 1-D");
    int64_t ax = axis < 0 ? axis + (int64_t)tx->ndim : axis;
    if (ts->dims[0] != 1) {
        REQUIRE(ax >= 0 && ax < (int64_t)tx->ndim, ACLNN_ERR_PARAM_INVALID, op, "axis out of range");
        REQUIRE(ts->dims[0] == tx->dims[ax], ACLNN_ERR_PARAM_INVALID, op,
                "the size of scales must be 1 or the size of x's axis");
    }
    ksim_exec *e = ksim_exec_create(op, k_quantize, 1024);
    snap(e, 0, x);
    snap(e, 1, scales);
    snap(e, 2, out);
    e->iarg[0] = ax < 0 ? 0 : ax;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnQuantize)

/* ---- aclnnQuantMatmulV4 ---- */

/* elem returns the address of element (i, j) of the 2-D tensor t, whose
 * data starts at base. */
static unsigned char *elem(const ksim_tensor *t, unsigned char *base, int64_t i, int64_t j) {
    return base + (size_t)(i * t->strides[0] + j * t->strides[1]) * ksim_dtype_size(t->dtype);
}

/* k_quant_matmul: the int8 product as the Atlas A2 kernels compute it
 * (hicann/ops-nn matmul/quant_batch_matmul_v3, BmmDequantPertoken): the sum
 * of x1[m, k] * x2[k, n] exact in int32 (plus an INT32 bias, added by the
 * cube unit), then for a float out: f32(acc) (to nearest even; exact below
 * 2^24, a guess above), times scale[n] (or its one element), times
 * pertokenScale[m] if given, plus a float bias widened to float32, each
 * operation rounded in float32, and the result rounded to out's type to
 * nearest even (CAST_RINT). An INT32 out is the sum itself. t[0] x1, t[1] x2,
 * t[2] scale, t[3] pertokenScale (absent: none), t[4] bias (absent: none),
 * t[5] out; iarg[0] transposeX2. */
static int k_quant_matmul(ksim_exec *e, char *msg, size_t msglen) {
    (void)msg, (void)msglen;
    const ksim_tensor *a = &e->t[0], *b = &e->t[1], *sc = &e->t[2], *pt = &e->t[3], *bias = &e->t[4];
    const ksim_tensor *out = &e->t[5];
    bool tb = e->iarg[0] != 0;
    int64_t m = a->dims[0], k = a->dims[1], n = out->dims[1];
    bool per_tensor = sc->dims[0] == 1, int_bias = bias->magic != 0 && bias->dtype == ACL_INT32;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            int64_t acc = 0;
            for (int64_t p = 0; p < k; p++) {
                int8_t av = *(const int8_t *)elem(a, e->host[0], i, p);
                int8_t bv = *(const int8_t *)(tb ? elem(b, e->host[1], j, p) : elem(b, e->host[1], p, j));
                acc += (int64_t)av * bv;
            }
            uint32_t sum = (uint32_t)acc; /* int32 arithmetic wraps */
            if (int_bias) {
                sum += (uint32_t)geti(ACL_INT32, e->host[4] + (size_t)(j * bias->strides[0]) * 4);
            }
            unsigned char *po = elem(out, e->host[5], i, j);
            if (out->dtype == ACL_INT32) {
                puti(ACL_INT32, po, (int32_t)sum);
                continue;
            }
            float f = (float)(int32_t)sum;
            size_t ses = ksim_dtype_size(sc->dtype);
            f = f * getf(sc->dtype, e->host[2] + (size_t)((per_tensor ? 0 : j) * sc->strides[0]) * ses);
            if (pt->magic != 0) {
                f = getf(ACL_FLOAT, e->host[3] + (size_t)(i * pt->strides[0]) * 4) * f;
            }
            if (bias->magic != 0 && !int_bias) {
                size_t bes = ksim_dtype_size(bias->dtype);
                f = f + getf(bias->dtype, e->host[4] + (size_t)(j * bias->strides[0]) * bes);
            }
            putf(out->dtype, po, f);
        }
    }
    return 0;
}

/* The first phase checks what the aclnnQuantMatmulV4 documentation
 * (hicann/ops-nn matmul/quant_batch_matmul_v3/docs) and its parameter
 * checks (op_api/aclnn_quant_matmul_v4.cpp) require on Atlas A2, for the
 * cases simulated: int8 x1 and x2 of two dimensions, ND, x1 not transposed,
 * no offset, a FLOAT or BFLOAT16 scale, and FLOAT16, BFLOAT16 or INT32 out. */
KSIM_API aclnnStatus aclnnQuantMatmulV4GetWorkspaceSize(const aclTensor *x1, const aclTensor *x2, const aclTensor *scale,
                                                        const aclTensor *offset,
                                                        const aclTensor *pertokenScaleOptional, const aclTensor *bias,
                                                        bool transposeX1, bool transposeX2, const aclTensor *out,
                                                        uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnQuantMatmulV4";
    FIRST_PHASE("aclnnQuantMatmulV4");
    REQUIRE(live_tensor(x1) && live_tensor(x2) && live_tensor(scale) && live_tensor(out), ACLNN_ERR_PARAM_NULLPTR, op,
            "x1, x2, scale and out must be live aclTensors");
    REQUIRE(pertokenScaleOptional == NULL || live_tensor(pertokenScaleOptional), ACLNN_ERR_PARAM_NULLPTR, op,
            "pertokenScaleOptional is not a live aclTensor");
    REQUIRE(bias == NULL || live_tensor(bias), ACLNN_ERR_PARAM_NULLPTR, op, "bias is not a live aclTensor");
    REQUIRE(workspaceSize != NULL && executor != NULL, ACLNN_ERR_PARAM_NULLPTR, op, "NULL output pointer");
    REQUIRE(offset == NULL, ACLNN_ERR_PARAM_INVALID, op, "offset (INT8 out) is not simulated");
    REQUIRE(!transposeX1, ACLNN_ERR_PARAM_INVALID, op, "transposeX1 is not simulated");
    const ksim_tensor *a = (const ksim_tensor *)x1, *b = (const ksim_tensor *)x2, *s = (const ksim_tensor *)scale;
    const ksim_tensor *pt = (const ksim_tensor *)pertokenScaleOptional, *bi = (const ksim_tensor *)bias;
    const ksim_tensor *o = (const ksim_tensor *)out;
    REQUIRE(a->dtype == ACL_INT8 && b->dtype == ACL_INT8, ACLNN_ERR_PARAM_INVALID, op,
            "x1 and x2 must be INT8 (INT4 and packed INT32 are not simulated)");
    REQUIRE(a->format == ACL_FORMAT_ND && b->format == ACL_FORMAT_ND && o->format == ACL_FORMAT_ND,
            ACLNN_ERR_PARAM_INVALID, op, "only format ND is simulated");
    REQUIRE(a->ndim == 2 && b->ndim == 2 && o->ndim == 2, ACLNN_ERR_PARAM_INVALID, op,
            "x1, x2 and out must have 2 dimensions (batches are not simulated)");
    REQUIRE(numel(a) > 0 && numel(b) > 0 && numel(s) > 0, ACLNN_ERR_PARAM_INVALID, op, "x1, x2 or scale is empty");
    REQUIRE(a->dims[1] <= 65535 && b->dims[1] <= 65535, ACLNN_ERR_PARAM_INVALID, op,
            "x1 last dim or x2 last dim is larger than 65535");
    int64_t m = a->dims[0], k = a->dims[1];
    int64_t k2 = transposeX2 ? b->dims[1] : b->dims[0], n = transposeX2 ? b->dims[0] : b->dims[1];
    REQUIRE(k == k2, ACLNN_ERR_PARAM_INVALID, op, "x1's k differs from x2's");
    REQUIRE(o->dims[0] == m && o->dims[1] == n, ACLNN_ERR_PARAM_INVALID, op, "out must be [m, n]");
    REQUIRE(s->ndim == 1 && (s->dims[0] == 1 || s->dims[0] == n), ACLNN_ERR_PARAM_INVALID, op,
            "scale must be 1-D of 1 or n elements");
    REQUIRE(s->dtype == ACL_FLOAT || s->dtype == ACL_BF16, ACLNN_ERR_PARAM_INVALID, op,
            "scale must be FLOAT or BFLOAT16 (UINT64 and INT64 are not simulated)");
    if (pt != NULL) {
        REQUIRE(pt->dtype == ACL_FLOAT && pt->ndim == 1 && pt->dims[0] == m, ACLNN_ERR_PARAM_INVALID, op,
                "pertokenScaleOptional must be FLOAT [m]");
    }
    if (bi != NULL) {
        REQUIRE(bi->ndim == 1 && bi->dims[0] == n, ACLNN_ERR_PARAM_INVALID, op,
                "bias must be 1-D of n elements (3-D bias is not simulated)");
        REQUIRE(bi->dtype == ACL_INT32 || bi->dtype == ACL_BF16 || bi->dtype == ACL_FLOAT16 || bi->dtype == ACL_FLOAT,
                ACLNN_ERR_PARAM_INVALID, op, "bias must be INT32, BFLOAT16, FLOAT16 or FLOAT");
    }
    /* The data type combinations of the Atlas A2 table. */
    switch (o->dtype) {
    case ACL_INT32:
        REQUIRE(pt == NULL && (bi == NULL || bi->dtype == ACL_INT32), ACLNN_ERR_PARAM_INVALID, op,
                "INT32 out takes no pertokenScaleOptional and only an INT32 bias");
        break;
    case ACL_BF16:
        REQUIRE(bi == NULL || bi->dtype != ACL_FLOAT16, ACLNN_ERR_PARAM_INVALID, op,
                "a FLOAT16 bias needs FLOAT16 out");
        break;
    case ACL_FLOAT16:
        REQUIRE(pt != NULL, ACLNN_ERR_PARAM_INVALID, op,
                "FLOAT16 out without pertokenScaleOptional needs a UINT64 or INT64 scale, which is not simulated");
        REQUIRE(s->dtype == ACL_FLOAT, ACLNN_ERR_PARAM_INVALID, op, "FLOAT16 out needs a FLOAT scale");
        REQUIRE(bi == NULL || bi->dtype != ACL_BF16, ACLNN_ERR_PARAM_INVALID, op, "a BFLOAT16 bias needs BFLOAT16 out");
        break;
    default:
        return bad(ACLNN_ERR_PARAM_INVALID, op, "%s", "out must be FLOAT16, BFLOAT16 or INT32 (INT8 is not simulated)");
    }
    ksim_exec *e = ksim_exec_create(op, k_quant_matmul, 4096);
    snap(e, 0, x1);
    snap(e, 1, x2);
    snap(e, 2, scale);
    snap(e, 3, pertokenScaleOptional);
    snap(e, 4, bias);
    snap(e, 5, out);
    e->iarg[0] = transposeX2;
    return finish(e, workspaceSize, executor);
}
SECOND_PHASE(aclnnQuantMatmulV4)
