package ascend

import (
	"reflect"
	"unsafe"
)

// The C functions kitchen calls, with the signatures of the CANN 8.1.RC1
// headers (internal/ascendsim/README.md lists each with its header;
// TestAPIMatchesCANNHeader checks these types against the prototypes in
// internal/ascendsim/csrc/cann.h, which the simulator compiles against). Go
// types map to C as purego passes them: uintptr for handles and device
// addresses, unsafe.Pointer and *T for host memory, int32 for int, enums and
// aclError/aclnnStatus, uint64/int64 for the fixed-width integers.
//
// Every aclnn operator comes as two functions: xxxGetWorkspaceSize, which
// checks the arguments and returns an executor and a workspace size, and
// xxx, which queues the executor on a stream; their second halves share one
// signature, phase2.
type phase2 = func(workspace uintptr, workspaceSize uint64, executor uintptr, stream uintptr) int32

// libNames are the libraries, in load order.
var libNames = [...]string{"libascendcl.so", "libnnopbase.so", "libopapi.so"}

const (
	libACL  = 0 // libascendcl.so, the runtime: its handle and path are used by name
	numLibs = len(libNames)
)

// api is every C function kitchen binds, and the only list of them: one
// embedded struct per library, in the order of libNames, each field named
// after its C function (or with the C name in a sym tag). symbols reads it.
type api struct {
	ascendcl
	nnopbase
	opapi
}

// ascendcl is libascendcl.so: acl/acl.h, acl/acl_rt.h.
type ascendcl struct {
	aclInit                func(configPath unsafe.Pointer) int32
	aclFinalize            func() int32
	aclGetRecentErrMsg     func() string
	aclrtGetDeviceCount    func(count *uint32) int32
	aclrtSetDevice         func(deviceID int32) int32
	aclrtResetDevice       func(deviceID int32) int32
	aclrtGetCurrentContext func(ctx *uintptr) int32
	aclrtSetCurrentContext func(ctx uintptr) int32
	aclrtGetDeviceSatMode  func(mode *int32) int32
	aclrtSetDeviceSatMode  func(mode int32) int32
	aclrtCreateStream      func(stream *uintptr) int32
	aclrtDestroyStream     func(stream uintptr) int32
	aclrtSynchronizeStream func(stream uintptr) int32
	aclrtMalloc            func(devPtr *uintptr, size uintptr, policy int32) int32
	aclrtFree              func(devPtr uintptr) int32
	// aclrtMemcpy, bound once per direction so host memory travels as a
	// pointer and device memory as an address.
	aclrtMemcpyToDevice func(dst uintptr, destMax uintptr, src unsafe.Pointer, count uintptr, kind int32) int32 `sym:"aclrtMemcpy"`
	aclrtMemcpyToHost   func(dst unsafe.Pointer, destMax uintptr, src uintptr, count uintptr, kind int32) int32 `sym:"aclrtMemcpy"`
	aclrtMemcpyOnDevice func(dst uintptr, destMax uintptr, src uintptr, count uintptr, kind int32) int32        `sym:"aclrtMemcpy"`
}

// nnopbase is libnnopbase.so: aclnn/acl_meta.h.
type nnopbase struct {
	aclCreateTensor               func(viewDims *int64, viewDimsNum uint64, dataType int32, stride *int64, offset int64, format int32, storageDims *int64, storageDimsNum uint64, tensorData uintptr) uintptr
	aclDestroyTensor              func(tensor uintptr) int32
	aclCreateScalar               func(value unsafe.Pointer, dataType int32) uintptr
	aclDestroyScalar              func(scalar uintptr) int32
	aclCreateIntArray             func(value *int64, size uint64) uintptr
	aclDestroyIntArray            func(array uintptr) int32
	aclSetAclOpExecutorRepeatable func(executor uintptr) int32
	aclDestroyAclOpExecutor       func(executor uintptr) int32
}

// opapi is libopapi.so: aclnnop/aclnn_*.h. ws and ex are the workspace size
// and executor outputs of every first phase.
type opapi struct {
	aclnnCastGetWorkspaceSize                    func(self uintptr, dtype int32, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnCast                                    phase2
	aclnnAbsGetWorkspaceSize                     func(self, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnAbs                                     phase2
	aclnnAminmaxDimGetWorkspaceSize              func(self uintptr, dim int64, keepDim bool, minOut, maxOut uintptr, ws *uint64, ex *uintptr) int32
	aclnnAminmaxDim                              phase2
	aclnnAminGetWorkspaceSize                    func(self, dim uintptr, keepDim bool, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnAmin                                    phase2
	aclnnAllGetWorkspaceSize                     func(self, dim uintptr, keepDim bool, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnAll                                     phase2
	aclnnMaximumGetWorkspaceSize                 func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnMaximum                                 phase2
	aclnnMulGetWorkspaceSize                     func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnMul                                     phase2
	aclnnDivGetWorkspaceSize                     func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnDiv                                     phase2
	aclnnAddGetWorkspaceSize                     func(self, other, alpha, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnAdd                                     phase2
	aclnnMulsGetWorkspaceSize                    func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnMuls                                    phase2
	aclnnDivsGetWorkspaceSize                    func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnDivs                                    phase2
	aclnnAddsGetWorkspaceSize                    func(self, other, alpha, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnAdds                                    phase2
	aclnnClampMinGetWorkspaceSize                func(self, min, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnClampMin                                phase2
	aclnnClampGetWorkspaceSize                   func(self, min, max, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnClamp                                   phase2
	aclnnFloorGetWorkspaceSize                   func(self, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnFloor                                   phase2
	aclnnIsFiniteGetWorkspaceSize                func(self, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnIsFinite                                phase2
	aclnnEqScalarGetWorkspaceSize                func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnEqScalar                                phase2
	aclnnGtScalarGetWorkspaceSize                func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnGtScalar                                phase2
	aclnnLogicalAndGetWorkspaceSize              func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnLogicalAnd                              phase2
	aclnnLogicalNotGetWorkspaceSize              func(self, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnLogicalNot                              phase2
	aclnnInplaceFillScalarGetWorkspaceSize       func(selfRef, value uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceFillScalar                       phase2
	aclnnInplaceMaskedFillScalarGetWorkspaceSize func(selfRef, mask, value uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceMaskedFillScalar                 phase2
	aclnnInplaceCopyGetWorkspaceSize             func(selfRef, src uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceCopy                             phase2
	aclnnArangeGetWorkspaceSize                  func(start, end, step, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnArange                                  phase2
	aclnnInplaceBitwiseAndScalarGetWorkspaceSize func(selfRef, other uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceBitwiseAndScalar                 phase2
	aclnnInplaceBitwiseXorTensorGetWorkspaceSize func(selfRef, other uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceBitwiseXorTensor                 phase2
	aclnnInplaceAddsGetWorkspaceSize             func(selfRef, other, alpha uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceAdds                             phase2
	aclnnInplaceAddGetWorkspaceSize              func(selfRef, other, alpha uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceAdd                              phase2
	aclnnInplaceMulsGetWorkspaceSize             func(selfRef, other uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceMuls                             phase2
	aclnnInplaceFloorDividesGetWorkspaceSize     func(selfRef, other uintptr, ws *uint64, ex *uintptr) int32
	aclnnInplaceFloorDivides                     phase2
	aclnnFloorDividesGetWorkspaceSize            func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnFloorDivides                            phase2
	aclnnFloorDivideGetWorkspaceSize             func(self, other, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnFloorDivide                             phase2
	aclnnPowScalarTensorGetWorkspaceSize         func(self, exponent, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnPowScalarTensor                         phase2
	aclnnDynamicQuantV2GetWorkspaceSize          func(x, smoothScales, groupIndex uintptr, dstType int64, yOut, scaleOut, offsetOut uintptr, ws *uint64, ex *uintptr) int32
	aclnnDynamicQuantV2                          phase2
	aclnnQuantizeGetWorkspaceSize                func(x, scales, zeroPoints uintptr, dtype int32, axis int32, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnQuantize                                phase2
	aclnnQuantMatmulV4GetWorkspaceSize           func(x1, x2, scale, offset, pertokenScale, bias uintptr, transposeX1, transposeX2 bool, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnQuantMatmulV4                           phase2
	aclnnExpGetWorkspaceSize                     func(self, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnExp                                     phase2
	aclnnIndexSelectGetWorkspaceSize             func(self uintptr, dim int64, index, out uintptr, ws *uint64, ex *uintptr) int32
	aclnnIndexSelect                             phase2
}

// symbol is one C function to bind: the Go field it fills and the library
// that exports it.
type symbol struct {
	fn   any
	name string
	lib  int
}

// symbols lists every function kitchen binds, read from api's fields: the
// library is the index of the embedded struct holding the field, the C name
// is the field's own unless a sym tag gives another.
func (a *api) symbols() []symbol {
	var s []symbol
	v := reflect.ValueOf(a).Elem()
	for lib := range v.NumField() {
		fns := v.Field(lib)
		for i := range fns.NumField() {
			f := fns.Type().Field(i)
			name := f.Name
			if sym, ok := f.Tag.Lookup("sym"); ok {
				name = sym
			}
			// The field is unexported, so reflect gives its address only
			// untyped; purego.RegisterFunc needs a typed pointer.
			fn := reflect.NewAt(f.Type, unsafe.Pointer(fns.Field(i).UnsafeAddr())).Interface()
			s = append(s, symbol{fn, name, lib})
		}
	}
	return s
}

const (
	aclFormatND           int32 = 2      // aclFormat ACL_FORMAT_ND
	aclMemMallocHugeFirst int32 = 0      // aclrtMemMallocPolicy ACL_MEM_MALLOC_HUGE_FIRST
	aclMemcpyHostToDevice int32 = 1      // aclrtMemcpyKind ACL_MEMCPY_HOST_TO_DEVICE
	aclMemcpyDeviceToHost int32 = 2      // aclrtMemcpyKind ACL_MEMCPY_DEVICE_TO_HOST
	aclMemcpyDeviceToDev  int32 = 3      // aclrtMemcpyKind ACL_MEMCPY_DEVICE_TO_DEVICE
	aclOverflowModeInfNaN int32 = 1      // aclrtFloatOverflowMode ACL_RT_OVERFLOW_MODE_INFNAN
	aclErrorRepeatInit    int32 = 100002 // ACL_ERROR_REPEAT_INITIALIZE
)
