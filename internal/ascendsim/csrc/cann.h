/*
 * The CANN 8.1 functions that kitchen's CANN ABI simulator implements, with
 * the parameter types of CANN's own headers (acl/acl.h, acl/acl_rt.h,
 * aclnn/acl_meta.h, aclnnop/aclnn_*.h; README.md beside this directory
 * lists each with its header). Every simulator source includes this file,
 * so a definition whose signature differs from its declaration here fails
 * to compile, and backend/ascend's TestAPIMatchesCANNHeader checks the Go
 * bindings (purego function types) against the same declarations.
 *
 * Types are written as CANN writes them; handle types are opaque structs
 * or void pointers, enums are int (their C ABI).
 */
#ifndef KSIM_CANN_H
#define KSIM_CANN_H

#include "ksim.h"

typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;
typedef struct aclOpExecutor aclOpExecutor;

/* acl/acl.h */
KSIM_API aclError aclInit(const char *configPath);
KSIM_API aclError aclFinalize(void);
KSIM_API const char *aclGetRecentErrMsg(void);

/* acl/acl_rt.h */
KSIM_API aclError aclrtGetDeviceCount(uint32_t *count);
KSIM_API aclError aclrtSetDevice(int32_t deviceId);
KSIM_API aclError aclrtResetDevice(int32_t deviceId);
KSIM_API aclError aclrtGetCurrentContext(aclrtContext *context);
KSIM_API aclError aclrtSetCurrentContext(aclrtContext context);
KSIM_API aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode);
KSIM_API aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode);
KSIM_API aclError aclrtCreateStream(aclrtStream *stream);
KSIM_API aclError aclrtDestroyStream(aclrtStream stream);
KSIM_API aclError aclrtSynchronizeStream(aclrtStream stream);
KSIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
KSIM_API aclError aclrtFree(void *devPtr);
KSIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);

/* aclnn/acl_meta.h */
KSIM_API aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                    const int64_t *stride, int64_t offset, aclFormat format,
                                    const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData);
KSIM_API aclnnStatus aclDestroyTensor(const aclTensor *tensor);
KSIM_API aclScalar *aclCreateScalar(void *value, aclDataType dataType);
KSIM_API aclnnStatus aclDestroyScalar(const aclScalar *scalar);
KSIM_API aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size);
KSIM_API aclnnStatus aclDestroyIntArray(const aclIntArray *array);
KSIM_API aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor);
KSIM_API aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);

/* The aclnn operators: a first phase and a second phase each. Some headers
 * write the second phase's last parameter as `const aclrtStream`, the same
 * ABI. */
/* aclnnop/aclnn_cast.h */
KSIM_API aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnCast(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_abs.h */
KSIM_API aclnnStatus aclnnAbsGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnAbs(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_amin.h */
KSIM_API aclnnStatus aclnnAminGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnAmin(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_aminmax_dim.h */
KSIM_API aclnnStatus aclnnAminmaxDimGetWorkspaceSize(const aclTensor *self, const int64_t dim, bool keepDim, aclTensor *minOut, aclTensor *maxOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnAminmaxDim(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_all.h */
KSIM_API aclnnStatus aclnnAllGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepdim, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnAll(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_maximum.h */
KSIM_API aclnnStatus aclnnMaximumGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnMaximum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_mul.h */
KSIM_API aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnMuls(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnInplaceMulsGetWorkspaceSize(aclTensor *selfRef, const aclScalar *other, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceMuls(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_div.h */
KSIM_API aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnDiv(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnDivsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnDivs(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_add.h */
KSIM_API aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnAdds(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnInplaceAddGetWorkspaceSize(const aclTensor *selfRef, const aclTensor *other, const aclScalar *alpha, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnInplaceAddsGetWorkspaceSize(const aclTensor *selfRef, const aclScalar *other, const aclScalar *alpha, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceAdds(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_clamp.h */
KSIM_API aclnnStatus aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin, const aclScalar *clipValueMax, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnClamp(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnClampMinGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnClampMin(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_floor.h */
KSIM_API aclnnStatus aclnnFloorGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnFloor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_isfinite.h */
KSIM_API aclnnStatus aclnnIsFiniteGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnIsFinite(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_eq_scalar.h */
KSIM_API aclnnStatus aclnnEqScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnEqScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_gt_scalar.h */
KSIM_API aclnnStatus aclnnGtScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnGtScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_logical_and.h */
KSIM_API aclnnStatus aclnnLogicalAndGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnLogicalAnd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_logical_not.h */
KSIM_API aclnnStatus aclnnLogicalNotGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnLogicalNot(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_fill_scalar.h */
KSIM_API aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclScalar *value, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceFillScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_masked_fill_scalar.h */
KSIM_API aclnnStatus aclnnInplaceMaskedFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclTensor *mask, const aclScalar *value, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceMaskedFillScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_copy.h */
KSIM_API aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceCopy(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_arange.h */
KSIM_API aclnnStatus aclnnArangeGetWorkspaceSize(const aclScalar *start, const aclScalar *end, const aclScalar *step, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnArange(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_bitwise_and_scalar.h */
KSIM_API aclnnStatus aclnnInplaceBitwiseAndScalarGetWorkspaceSize(const aclTensor *selfRef, const aclScalar *other, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceBitwiseAndScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_bitwise_xor_tensor.h */
KSIM_API aclnnStatus aclnnInplaceBitwiseXorTensorGetWorkspaceSize(aclTensor *selfRef, const aclTensor *other, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceBitwiseXorTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_floor_divide.h */
KSIM_API aclnnStatus aclnnFloorDivideGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnFloorDivide(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnFloorDividesGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnFloorDivides(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
KSIM_API aclnnStatus aclnnInplaceFloorDividesGetWorkspaceSize(aclTensor *selfRef, const aclScalar *other, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnInplaceFloorDivides(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_pow.h */
KSIM_API aclnnStatus aclnnPowScalarTensorGetWorkspaceSize(const aclScalar *self, const aclTensor *exponent, const aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnPowScalarTensor(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_dynamic_quant_v2.h */
KSIM_API aclnnStatus aclnnDynamicQuantV2GetWorkspaceSize(const aclTensor *x, const aclTensor *smoothScalesOptional, const aclTensor *groupIndexOptional, int64_t dstType, const aclTensor *yOut, const aclTensor *scaleOut, const aclTensor *offsetOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnDynamicQuantV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_quantize.h */
KSIM_API aclnnStatus aclnnQuantizeGetWorkspaceSize(const aclTensor *x, const aclTensor *scales, const aclTensor *zeroPoints, aclDataType dtype, int32_t axis, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnQuantize(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_quant_matmul_v4.h */
KSIM_API aclnnStatus aclnnQuantMatmulV4GetWorkspaceSize(const aclTensor *x1, const aclTensor *x2, const aclTensor *scale, const aclTensor *offset, const aclTensor *pertokenScaleOptional, const aclTensor *bias, bool transposeX1, bool transposeX2, const aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnQuantMatmulV4(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

/* aclnnop/aclnn_exp.h */
KSIM_API aclnnStatus aclnnExpGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnExp(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);
/* aclnnop/aclnn_index_select.h */
KSIM_API aclnnStatus aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
KSIM_API aclnnStatus aclnnIndexSelect(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#endif
