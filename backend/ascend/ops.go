package ascend

// One method per aclnn operator kitchen uses. Each creates the aclTensor
// and aclScalar handles of its arguments (released with the session) and
// queues the operator; outputs are arrays the caller allocated.

func (s *session) cast(x, out arr) error {
	t, err := s.tensorsOf(x, out)
	if err != nil {
		return err
	}
	return s.run("aclnnCast", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnCastGetWorkspaceSize(t[0], out.dt, t[1], ws, ex)
	}, s.api.aclnnCast)
}

// unary runs an operator of the form op(self, out).
func (s *session) unary(name string, first func(self, out uintptr, ws *uint64, ex *uintptr) int32, second phase2, x, out arr) error {
	t, err := s.tensorsOf(x, out)
	if err != nil {
		return err
	}
	return s.run(name, func(ws *uint64, ex *uintptr) int32 { return first(t[0], t[1], ws, ex) }, second)
}

func (s *session) abs(x, out arr) error {
	return s.unary("aclnnAbs", s.api.aclnnAbsGetWorkspaceSize, s.api.aclnnAbs, x, out)
}

func (s *session) floor(x, out arr) error {
	return s.unary("aclnnFloor", s.api.aclnnFloorGetWorkspaceSize, s.api.aclnnFloor, x, out)
}

func (s *session) isFinite(x, out arr) error {
	return s.unary("aclnnIsFinite", s.api.aclnnIsFiniteGetWorkspaceSize, s.api.aclnnIsFinite, x, out)
}

func (s *session) logicalNot(x, out arr) error {
	return s.unary("aclnnLogicalNot", s.api.aclnnLogicalNotGetWorkspaceSize, s.api.aclnnLogicalNot, x, out)
}

// binary runs an operator of the form op(self, other, out).
func (s *session) binary(name string, first func(self, other, out uintptr, ws *uint64, ex *uintptr) int32, second phase2, a, b, out arr) error {
	t, err := s.tensorsOf(a, b, out)
	if err != nil {
		return err
	}
	return s.run(name, func(ws *uint64, ex *uintptr) int32 { return first(t[0], t[1], t[2], ws, ex) }, second)
}

func (s *session) mul(a, b, out arr) error {
	return s.binary("aclnnMul", s.api.aclnnMulGetWorkspaceSize, s.api.aclnnMul, a, b, out)
}

func (s *session) div(a, b, out arr) error {
	return s.binary("aclnnDiv", s.api.aclnnDivGetWorkspaceSize, s.api.aclnnDiv, a, b, out)
}

func (s *session) maximum(a, b, out arr) error {
	return s.binary("aclnnMaximum", s.api.aclnnMaximumGetWorkspaceSize, s.api.aclnnMaximum, a, b, out)
}

func (s *session) logicalAnd(a, b, out arr) error {
	return s.binary("aclnnLogicalAnd", s.api.aclnnLogicalAndGetWorkspaceSize, s.api.aclnnLogicalAnd, a, b, out)
}

func (s *session) floorDivide(a, b, out arr) error {
	return s.binary("aclnnFloorDivide", s.api.aclnnFloorDivideGetWorkspaceSize, s.api.aclnnFloorDivide, a, b, out)
}

// add computes out = a + 1*b.
func (s *session) add(a, b, out arr) error {
	t, err := s.tensorsOf(a, b, out)
	if err != nil {
		return err
	}
	alpha, err := s.f32(1)
	if err != nil {
		return err
	}
	return s.run("aclnnAdd", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnAddGetWorkspaceSize(t[0], t[1], alpha, t[2], ws, ex)
	}, s.api.aclnnAdd)
}

// withF32 runs an operator of a tensor and a float32 scalar.
func (s *session) withF32(name string, first func(self, other, out uintptr, ws *uint64, ex *uintptr) int32, second phase2, a arr, c float32, out arr) error {
	v, err := s.f32(c)
	if err != nil {
		return err
	}
	return s.withScalar(name, first, second, a, v, out)
}

// withScalar runs an operator of the form op(self, scalar, out).
func (s *session) withScalar(name string, first func(self, other, out uintptr, ws *uint64, ex *uintptr) int32, second phase2, a arr, c uintptr, out arr) error {
	t, err := s.tensorsOf(a, out)
	if err != nil {
		return err
	}
	return s.run(name, func(ws *uint64, ex *uintptr) int32 { return first(t[0], c, t[1], ws, ex) }, second)
}

func (s *session) muls(a arr, c float32, out arr) error {
	return s.withF32("aclnnMuls", s.api.aclnnMulsGetWorkspaceSize, s.api.aclnnMuls, a, c, out)
}

func (s *session) divs(a arr, c float32, out arr) error {
	return s.withF32("aclnnDivs", s.api.aclnnDivsGetWorkspaceSize, s.api.aclnnDivs, a, c, out)
}

func (s *session) clampMin(a arr, c float32, out arr) error {
	return s.withF32("aclnnClampMin", s.api.aclnnClampMinGetWorkspaceSize, s.api.aclnnClampMin, a, c, out)
}

func (s *session) eqScalar(a arr, c float32, out arr) error {
	return s.withF32("aclnnEqScalar", s.api.aclnnEqScalarGetWorkspaceSize, s.api.aclnnEqScalar, a, c, out)
}

func (s *session) gtScalar(a arr, c float32, out arr) error {
	return s.withF32("aclnnGtScalar", s.api.aclnnGtScalarGetWorkspaceSize, s.api.aclnnGtScalar, a, c, out)
}

func (s *session) floorDivides(a arr, c int64, out arr) error {
	v, err := s.i64(c)
	if err != nil {
		return err
	}
	return s.withScalar("aclnnFloorDivides", s.api.aclnnFloorDividesGetWorkspaceSize, s.api.aclnnFloorDivides, a, v, out)
}

// adds computes out = a + 1*c.
func (s *session) adds(a arr, c float32, out arr) error { return addsWith(s, a, c, out, s.f32) }

// addsWith runs aclnnAdds with c and alpha (1) made scalars by scalar.
func addsWith[T float32 | float64](s *session, a arr, c T, out arr, scalar func(T) (uintptr, error)) error {
	t, err := s.tensorsOf(a, out)
	if err != nil {
		return err
	}
	v, err := scalar(c)
	if err != nil {
		return err
	}
	alpha, err := scalar(1)
	if err != nil {
		return err
	}
	return s.run("aclnnAdds", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnAddsGetWorkspaceSize(t[0], v, alpha, t[1], ws, ex)
	}, s.api.aclnnAdds)
}

func (s *session) clamp(a arr, lo, hi float32, out arr) error {
	t, err := s.tensorsOf(a, out)
	if err != nil {
		return err
	}
	l, err := s.f32(lo)
	if err != nil {
		return err
	}
	h, err := s.f32(hi)
	if err != nil {
		return err
	}
	return s.run("aclnnClamp", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnClampGetWorkspaceSize(t[0], l, h, t[1], ws, ex)
	}, s.api.aclnnClamp)
}

// amin writes the minimum of x over dimension dim, kept, into out.
func (s *session) amin(x arr, dim int64, out arr) error {
	t, err := s.tensorsOf(x, out)
	if err != nil {
		return err
	}
	dims, err := s.ints(dim)
	if err != nil {
		return err
	}
	return s.run("aclnnAmin", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnAminGetWorkspaceSize(t[0], dims, true, t[1], ws, ex)
	}, s.api.aclnnAmin)
}

// all writes into the bool array out whether every element of the bool
// array x is true, over the given dimensions, kept.
func (s *session) all(x, out arr, dims ...int64) error {
	t, err := s.tensorsOf(x, out)
	if err != nil {
		return err
	}
	d, err := s.ints(dims...)
	if err != nil {
		return err
	}
	return s.run("aclnnAll", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnAllGetWorkspaceSize(t[0], d, true, t[1], ws, ex)
	}, s.api.aclnnAll)
}

// aminmax writes the minimum and the maximum of x over dimension dim, kept,
// into mn and mx (one operator; the NPU makes two reductions of x).
func (s *session) aminmax(x arr, dim int64, mn, mx arr) error {
	t, err := s.tensorsOf(x, mn, mx)
	if err != nil {
		return err
	}
	return s.run("aclnnAminmaxDim", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnAminmaxDimGetWorkspaceSize(t[0], dim, true, t[1], t[2], ws, ex)
	}, s.api.aclnnAminmaxDim)
}

// fill sets every element of a to c (a float32 exactly representable in a's type).
func (s *session) fill(a arr, c float32) error {
	t, err := s.tensor(a)
	if err != nil {
		return err
	}
	v, err := s.f32(c)
	if err != nil {
		return err
	}
	return s.run("aclnnInplaceFillScalar", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnInplaceFillScalarGetWorkspaceSize(t, v, ws, ex)
	}, s.api.aclnnInplaceFillScalar)
}

// maskedFill sets the elements of a where mask (bool, broadcast to a) holds
// to the scalar c.
func (s *session) maskedFill(a, mask arr, c uintptr) error {
	t, err := s.tensorsOf(a, mask)
	if err != nil {
		return err
	}
	return s.run("aclnnInplaceMaskedFillScalar", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnInplaceMaskedFillScalarGetWorkspaceSize(t[0], t[1], c, ws, ex)
	}, s.api.aclnnInplaceMaskedFillScalar)
}

// inplace runs an operator of the form self op= other.
func (s *session) inplace(name string, first func(self, other uintptr, ws *uint64, ex *uintptr) int32, second phase2, a, b arr) error {
	t, err := s.tensorsOf(a, b)
	if err != nil {
		return err
	}
	return s.run(name, func(ws *uint64, ex *uintptr) int32 { return first(t[0], t[1], ws, ex) }, second)
}

// copyTo copies src into dst on the device.
func (s *session) copyTo(dst, src arr) error {
	return s.inplace("aclnnInplaceCopy", s.api.aclnnInplaceCopyGetWorkspaceSize, s.api.aclnnInplaceCopy, dst, src)
}

// arange fills the int64 array out with 0, 1, 2, ...
func (s *session) arange(out arr) error {
	t, err := s.tensor(out)
	if err != nil {
		return err
	}
	var sc [3]uintptr
	for i, v := range []int64{0, out.shape[0], 1} {
		if sc[i], err = s.i64(v); err != nil {
			return err
		}
	}
	return s.run("aclnnArange", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnArangeGetWorkspaceSize(sc[0], sc[1], sc[2], t, ws, ex)
	}, s.api.aclnnArange)
}

// The in-place integer operators of Noise: a op= c.

func (s *session) inplaceScalar(name string, first func(self, other uintptr, ws *uint64, ex *uintptr) int32, second phase2, a arr, c int64) error {
	t, err := s.tensor(a)
	if err != nil {
		return err
	}
	v, err := s.i64(c)
	if err != nil {
		return err
	}
	return s.run(name, func(ws *uint64, ex *uintptr) int32 { return first(t, v, ws, ex) }, second)
}

func (s *session) andI(a arr, c int64) error {
	return s.inplaceScalar("aclnnInplaceBitwiseAndScalar", s.api.aclnnInplaceBitwiseAndScalarGetWorkspaceSize, s.api.aclnnInplaceBitwiseAndScalar, a, c)
}

func (s *session) mulI(a arr, c int64) error {
	return s.inplaceScalar("aclnnInplaceMuls", s.api.aclnnInplaceMulsGetWorkspaceSize, s.api.aclnnInplaceMuls, a, c)
}

func (s *session) floorDivI(a arr, c int64) error {
	return s.inplaceScalar("aclnnInplaceFloorDivides", s.api.aclnnInplaceFloorDividesGetWorkspaceSize, s.api.aclnnInplaceFloorDivides, a, c)
}

func (s *session) addI(a arr, c int64) error {
	t, err := s.tensor(a)
	if err != nil {
		return err
	}
	v, err := s.i64(c)
	if err != nil {
		return err
	}
	alpha, err := s.i64(1)
	if err != nil {
		return err
	}
	return s.run("aclnnInplaceAdds", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnInplaceAddsGetWorkspaceSize(t, v, alpha, ws, ex)
	}, s.api.aclnnInplaceAdds)
}

// addT computes a += b for int64 arrays.
func (s *session) addT(a, b arr) error {
	t, err := s.tensorsOf(a, b)
	if err != nil {
		return err
	}
	alpha, err := s.i64(1)
	if err != nil {
		return err
	}
	return s.run("aclnnInplaceAdd", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnInplaceAddGetWorkspaceSize(t[0], t[1], alpha, ws, ex)
	}, s.api.aclnnInplaceAdd)
}

// xorT computes a ^= b.
func (s *session) xorT(a, b arr) error {
	return s.inplace("aclnnInplaceBitwiseXorTensor", s.api.aclnnInplaceBitwiseXorTensorGetWorkspaceSize, s.api.aclnnInplaceBitwiseXorTensor, a, b)
}

// pow2 computes out = 2 ** e for int64 arrays.
func (s *session) pow2(e, out arr) error {
	t, err := s.tensorsOf(e, out)
	if err != nil {
		return err
	}
	two, err := s.i64(2)
	if err != nil {
		return err
	}
	return s.run("aclnnPowScalarTensor", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnPowScalarTensorGetWorkspaceSize(two, t[0], t[1], ws, ex)
	}, s.api.aclnnPowScalarTensor)
}

// dynamicQuant runs the symmetric int8 aclnnDynamicQuantV2 on the 2-D x.
func (s *session) dynamicQuant(x, y, scale arr) error {
	t, err := s.tensorsOf(x, y, scale)
	if err != nil {
		return err
	}
	return s.run("aclnnDynamicQuantV2", func(ws *uint64, ex *uintptr) int32 {
		// No smoothing scales, no group index, int8 out, no offset (symmetric).
		return s.api.aclnnDynamicQuantV2GetWorkspaceSize(t[0], 0, 0, int64(aclInt8), t[1], t[2], 0, ws, ex)
	}, s.api.aclnnDynamicQuantV2)
}

// quantize runs aclnnQuantize: int8 out = x / scales, with scales (of x's
// type, 1-D) one for all of x or one per index of dimension axis.
func (s *session) quantize(x, scales, out arr, axis int32) error {
	t, err := s.tensorsOf(x, scales, out)
	if err != nil {
		return err
	}
	return s.run("aclnnQuantize", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnQuantizeGetWorkspaceSize(t[0], t[1], 0, aclInt8, axis, t[2], ws, ex)
	}, s.api.aclnnQuantize)
}

// quantMatmul runs aclnnQuantMatmulV4 on int8 x1 [M, K] and x2, which is
// [K, N], or [N, K] when transposed (the operator then reads it
// transposed): out [M, N] is their product. For a float16 or bfloat16 out
// the int32 sums are scaled by scale (float32, one element or N) and, if
// pertoken is not nil, by pertoken[m] (float32, M), each product rounded
// in float32, and rounded to out; for an int32 out they are the sums
// themselves (scale, which the operator requires, is unused). No offset
// and no bias: kitchen adds the bias itself.
func (s *session) quantMatmul(x1, x2 arr, transposed bool, scale arr, pertoken *arr, out arr) error {
	t, err := s.tensorsOf(x1, x2, scale, out)
	if err != nil {
		return err
	}
	var pt uintptr
	if pertoken != nil {
		if pt, err = s.tensor(*pertoken); err != nil {
			return err
		}
	}
	return s.run("aclnnQuantMatmulV4", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnQuantMatmulV4GetWorkspaceSize(t[0], t[1], t[2], 0, pt, 0, false, transposed, t[3], ws, ex)
	}, s.api.aclnnQuantMatmulV4)
}

func (s *session) exp(x, out arr) error {
	return s.unary("aclnnExp", s.api.aclnnExpGetWorkspaceSize, s.api.aclnnExp, x, out)
}

// sub computes out = a - b, as aclnnAdd with alpha -1: the product by -1
// is exact, so this is IEEE subtraction, however the operator applies
// alpha.
func (s *session) sub(a, b, out arr) error {
	t, err := s.tensorsOf(a, b, out)
	if err != nil {
		return err
	}
	alpha, err := s.f32(-1)
	if err != nil {
		return err
	}
	return s.run("aclnnAdd", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnAddGetWorkspaceSize(t[0], t[1], alpha, t[2], ws, ex)
	}, s.api.aclnnAdd)
}

// mulsF64 and addsF64 take a double scalar, for double arrays: a float32
// scalar would round the constants of the float64 activations.
func (s *session) mulsF64(a arr, c float64, out arr) error {
	v, err := s.f64(c)
	if err != nil {
		return err
	}
	return s.withScalar("aclnnMuls", s.api.aclnnMulsGetWorkspaceSize, s.api.aclnnMuls, a, v, out)
}

func (s *session) addsF64(a arr, c float64, out arr) error { return addsWith(s, a, c, out, s.f64) }

// gtScalarI compares the integer array a with an int64 scalar, so that the
// comparison is exact (a float32 scalar would promote it to float32).
func (s *session) gtScalarI(a arr, c int64, out arr) error {
	v, err := s.i64(c)
	if err != nil {
		return err
	}
	return s.withScalar("aclnnGtScalar", s.api.aclnnGtScalarGetWorkspaceSize, s.api.aclnnGtScalar, a, v, out)
}

// indexSelect writes x's slices along dimension dim named by the 1-D int32
// or int64 index into out (aclnnIndexSelect). Indices must be in range:
// the operator does not check them.
func (s *session) indexSelect(x arr, dim int64, index, out arr) error {
	t, err := s.tensorsOf(x, index, out)
	if err != nil {
		return err
	}
	return s.run("aclnnIndexSelect", func(ws *uint64, ex *uintptr) int32 {
		return s.api.aclnnIndexSelectGetWorkspaceSize(t[0], dim, t[1], t[2], ws, ex)
	}, s.api.aclnnIndexSelect)
}
