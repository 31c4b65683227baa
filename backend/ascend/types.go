package ascend

import "github.com/gokitchen/kitchen/dtype"

// aclDataType values (acl/acl_base.h).
const (
	aclFloat   int32 = 0
	aclFloat16 int32 = 1
	aclInt8    int32 = 2
	aclInt32   int32 = 3
	aclUint8   int32 = 4
	aclInt64   int32 = 9
	aclDouble  int32 = 11
	aclBool    int32 = 12
	aclBF16    int32 = 27
)

// aclType is the CANN data type of a kitchen dtype.
func aclType(dt dtype.DType) int32 {
	switch dt {
	case dtype.Float32:
		return aclFloat
	case dtype.Float16:
		return aclFloat16
	case dtype.BFloat16:
		return aclBF16
	case dtype.Int8:
		return aclInt8
	case dtype.Int32:
		return aclInt32
	case dtype.Uint8:
		return aclUint8
	case dtype.Int64:
		return aclInt64
	}
	panic("ascend: no CANN type for " + dt.String())
}

// aclSize is the size in bytes of an element of CANN type dt.
func aclSize(dt int32) int {
	switch dt {
	case aclFloat, aclInt32:
		return 4
	case aclFloat16, aclBF16:
		return 2
	case aclInt64, aclDouble:
		return 8
	}
	return 1
}
