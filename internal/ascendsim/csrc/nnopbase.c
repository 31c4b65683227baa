/*
 * libnnopbase.so of kitchen's CANN ABI simulator: the aclnn/acl_meta.h
 * handles. Each function forwards to libascendcl.so, which holds the state.
 */
#include "cann.h"

KSIM_API aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                    const int64_t *stride, int64_t offset, aclFormat format,
                                    const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData) {
    return (aclTensor *)ksim_tensor_create(viewDims, viewDimsNum, dataType, stride, offset, format, storageDims,
                                           storageDimsNum, tensorData);
}

KSIM_API aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
    return ksim_tensor_destroy((const ksim_tensor *)tensor);
}

KSIM_API aclScalar *aclCreateScalar(void *value, aclDataType dataType) {
    return (aclScalar *)ksim_scalar_create(value, dataType);
}

KSIM_API aclnnStatus aclDestroyScalar(const aclScalar *scalar) {
    return ksim_scalar_destroy((const ksim_scalar *)scalar);
}

KSIM_API aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size) {
    return (aclIntArray *)ksim_intarray_create(value, size);
}

KSIM_API aclnnStatus aclDestroyIntArray(const aclIntArray *array) {
    return ksim_intarray_destroy((const ksim_intarray *)array);
}

KSIM_API aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor) {
    return ksim_exec_set_repeatable((ksim_exec *)executor);
}

KSIM_API aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor) {
    return ksim_exec_destroy((ksim_exec *)executor);
}
