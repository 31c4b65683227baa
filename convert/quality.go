package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend/cpu"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// LayerQuality is how closely a quantized layer's weight, dequantized as
// ComfyUI dequantizes it (q * scale, rotated back for ConvRot, in
// float32), reproduces the original weight w.
type LayerQuality struct {
	Name string `json:"name"`
	// Scales is "tensor" or "channel"; ConvRot the rotation's group (0:
	// none).
	Scales  string `json:"scales"`
	ConvRot int    `json:"convrot_group,omitempty"`
	// RelRMSError is ||w' - w|| / ||w|| over all elements (0 where w'
	// equals w).
	RelRMSError float64 `json:"rel_rms_error"`
	// SNR is 10·log10(||w||² / ||w' - w||²) in dB, nil where w' equals w
	// (an infinite ratio, which JSON cannot hold).
	SNR *float64 `json:"snr_db"`
}

// errorRows is about how many elements the weight error dequantizes at a
// time, so that its float32 copy stays small whatever the layer's size.
const errorRows = 1 << 20

// errorSums accumulates a layer's Σ(w' - w)² and Σw², a few rows at a
// time, always in the same order (steps of errorRows elements from the
// layer's first row), so the result does not depend on how the layer was
// cut into chunks that are a whole number of steps.
type errorSums struct{ diff, norm float64 }

// infiniteRow is the error for quantized rows whose dequantized values
// are not finite in float32: x is finite (the quantize operations refuse
// NaN and infinity), so a value within rounding of float32's largest has
// a scale that, times 127, overflows (with ConvRot, rotating back sums
// such values and may overflow too). ComfyUI would load infinities.
type infiniteRow struct{ row int }

func (e *infiniteRow) Error() string {
	return fmt.Sprintf("row %d dequantizes to infinity in float32", e.row)
}

// add dequantizes q and scale (rows of a layer, rotating back with group,
// if > 0, on the backend opts choose) a step at a time and compares them
// with x, the same rows of the original. scale is float32: one value, or
// one a row. The rotated rows go through *buf, grown as needed, so that
// a caller reuses it from layer to layer. Where a dequantized value is
// infinite it returns an *infiniteRow naming the first such row of x.
func (e *errorSums) add(ctx context.Context, x, q, scale *tensor.Tensor, group int, buf *[]byte, opts ...kitchen.Option) error {
	n, k := x.Dim(0), x.Dim(1)
	xb, err := x.Bytes()
	if err != nil {
		return err
	}
	qb, err := q.Bytes()
	if err != nil {
		return err
	}
	sb, err := scale.Bytes()
	if err != nil {
		return err
	}
	es := x.DType().Size()
	step := max(1, errorRows/k)
	if group == 0 {
		// No rotation: each dequantized value is q·scale, computed as the
		// sums go (cpu.QuantizedSquaredError), in the same order as
		// dequantizing each step into a float32 buffer and summing that,
		// which the rotated weights still do.
		scales := make([]float32, scale.Numel())
		for i := range scales {
			scales[i] = math.Float32frombits(binary.LittleEndian.Uint32(sb[4*i:]))
		}
		for r0 := 0; r0 < n; r0 += step {
			r1 := min(n, r0+step)
			sc, kc := scales, (r1-r0)*k // one scale: one row of the whole step
			if len(scales) > 1 {
				sc, kc = scales[r0:r1], k
			}
			dd, nn := sumQuantized(x.DType(), xb[r0*k*es:r1*k*es], qb[r0*k:r1*k], sc, kc)
			if !finite(dd) {
				return &infiniteRow{r0 + firstInfinite(qb[r0*k:r1*k], sc, kc)/k}
			}
			e.diff, e.norm = e.diff+dd, e.norm+nn
		}
		return nil
	}
	for r0 := 0; r0 < n; r0 += step {
		r1 := min(n, r0+step)
		qc, err := tensor.FromBytes(kitchen.Int8, qb[r0*k:r1*k], r1-r0, k)
		if err != nil {
			return err
		}
		sc := scale
		if scale.Numel() > 1 {
			if sc, err = tensor.FromBytes(kitchen.Float32, sb[r0*4:r1*4], r1-r0, 1); err != nil {
				return err
			}
		}
		// The float32 rows go into the caller's buffer, the same for every
		// step (see buffers).
		if need := (r1 - r0) * k * 4; cap(*buf) < need {
			*buf = make([]byte, need)
		}
		into, err := tensor.FromBytes(kitchen.Float32, (*buf)[:(r1-r0)*k*4], r1-r0, k)
		if err != nil {
			return err
		}
		d, err := kitchen.DequantizeInt8ConvRotWeight(ctx, qc, sc, slices.Concat(opts, []kitchen.Option{kitchen.Into(into), kitchen.WithConvRotGroup(group)})...)
		if err != nil {
			return err
		}
		db, err := d.Bytes()
		if err != nil {
			return err
		}
		dd, nn := sumSquares(x.DType(), xb[r0*k*es:r1*k*es], db)
		if !finite(dd) {
			return &infiniteRow{r0 + firstNonFinite(db)/k}
		}
		e.diff, e.norm = e.diff+dd, e.norm+nn
	}
	return nil
}

// WeightErrorSums returns Σ(w' - w)² and Σw² in float64, for w the
// original weight [N, K] (any float type) and w' its int8 form q [N, K]
// dequantized as ComfyUI dequantizes it: q·scale in float32 (scale one
// value, or one a row: [N] or [N, 1], any float type), rotated back with
// the ConvRot group if it is > 0 (dequantize_int8_convrot_weight, on the
// backend opts choose). These are the sums of the converter's weight
// error (LayerQuality), in its order: a step of rows at a time, so that
// beyond the tensors it holds a step's float32 rows, not the layer's.
// diff is +Inf where a dequantized value is not finite in float32; norm
// is then the sum over the steps before the one that overflowed. A weight
// with no elements has sums of 0.
func WeightErrorSums(ctx context.Context, w, q, scale *tensor.Tensor, group int, opts ...kitchen.Option) (diff, norm float64, err error) {
	if ctx == nil {
		return 0, 0, errors.New("convert: WeightErrorSums: nil context")
	}
	if w.Rank() != 2 || !w.DType().IsFloat() {
		return 0, 0, fmt.Errorf("convert: WeightErrorSums: the weight is %v, want a 2-D float tensor", w)
	}
	n := w.Dim(0)
	switch {
	case q.DType() != kitchen.Int8 || !slices.Equal(q.Shape(), w.Shape()):
		return 0, 0, fmt.Errorf("convert: WeightErrorSums: q is %v, want int8 of the weight's shape %v", q, w.Shape())
	case !scale.DType().IsFloat() || scale.Numel() != 1 && !slices.Equal(scale.Shape(), []int{n}) && !slices.Equal(scale.Shape(), []int{n, 1}):
		return 0, 0, fmt.Errorf("convert: WeightErrorSums: scale is %v, want a float of one element, [%d] or [%d, 1]", scale, n, n)
	}
	if scale.DType() != kitchen.Float32 {
		// add reads float32 scales; a float16 or bfloat16 one widens
		// exactly, and q·scale is the same float32 product.
		v, err := scale.Float32s()
		if err != nil {
			return 0, 0, err
		}
		if scale, err = tensor.FromFloat32(kitchen.Float32, v, scale.Shape()...); err != nil {
			return 0, 0, err
		}
	}
	if w.Numel() == 0 {
		return 0, 0, nil
	}
	var e errorSums
	var buf []byte
	err = e.add(ctx, w, q, scale, group, &buf, opts...)
	if ir := (*infiniteRow)(nil); errors.As(err, &ir) {
		return math.Inf(1), e.norm, nil
	}
	return e.diff, e.norm, err
}

// finite reports whether a sum of squares is finite: (w' - x)² of finite
// float32 values is, so one that is not had a w' that was not.
func finite(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }

// firstInfinite returns the index of the first value of q (rows of k,
// scales[r] that of row r) whose float32 product with its scale is
// infinite, or 0 if none is.
func firstInfinite(q []byte, scales []float32, k int) int {
	for i, v := range q {
		if math.IsInf(float64(float32(int8(v))*scales[i/k]), 0) {
			return i
		}
	}
	return 0
}

// firstNonFinite returns the index of the first float32 of b that is
// infinite or NaN (rotating back an infinity may give NaN), or 0 if none
// is.
func firstNonFinite(b []byte) int {
	for i := 0; i+4 <= len(b); i += 4 {
		if binary.LittleEndian.Uint32(b[i:])&0x7f800000 == 0x7f800000 {
			return i / 4
		}
	}
	return 0
}

// finish sets lq's error from the sums.
func (e *errorSums) finish(lq *LayerQuality) {
	if e.diff > 0 {
		// An all-zero weight comes back exactly; were it not, its error
		// would count as 100% (finite, for JSON).
		lq.RelRMSError = math.Sqrt(e.diff / max(e.norm, e.diff))
		snr := 10 * math.Log10(max(e.norm, e.diff)/e.diff)
		lq.SNR = &snr
	}
}

// sumBlock is how many values sumSquares adds up in one sequence.
const sumBlock = 1 << 14

// sumSquares returns Σ(d - x)² and Σx² in float64, for x the values of dt
// in xb and d the float32 values in db. Blocks of sumBlock values are
// summed in parallel, each in cpu.SquaredError's fixed order (which every
// kernel set follows), and the block sums in block order, so the result
// depends neither on the number of processors nor on the CPU.
func sumSquares(dt dtype.DType, xb, db []byte) (diff, norm float64) {
	es := dt.Size()
	return sumBlocks(len(db)/4, func(lo, hi int) (float64, float64) {
		return cpu.SquaredError(dt, xb[es*lo:es*hi], db[4*lo:4*hi])
	})
}

// sumQuantized is sumSquares with d the dequantized int8 values in qb
// (rows of k, scales[r] that of row r), the same blocks in the same
// order, each in cpu.QuantizedSquaredError's (that is, SquaredError's)
// order: the same bits as sumSquares of the dequantized rows.
func sumQuantized(dt dtype.DType, xb, qb []byte, scales []float32, k int) (diff, norm float64) {
	es := dt.Size()
	return sumBlocks(len(qb), func(lo, hi int) (float64, float64) {
		return cpu.QuantizedSquaredError(dt, xb[es*lo:es*hi], qb[lo:hi], scales, k, lo)
	})
}

// sumBlocks sums n values in blocks of sumBlock, sum(lo, hi) giving each
// block's two sums, in parallel, and adds the blocks' sums in block order.
func sumBlocks(n int, sum func(lo, hi int) (float64, float64)) (diff, norm float64) {
	blocks := (n + sumBlock - 1) / sumBlock
	sums := make([][2]float64, blocks)
	workers := min(runtime.GOMAXPROCS(0), blocks)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := w; b < blocks; b += workers {
				sums[b][0], sums[b][1] = sum(b*sumBlock, min(n, (b+1)*sumBlock))
			}
		})
	}
	wg.Wait()
	for _, s := range sums {
		diff, norm = diff+s[0], norm+s[1]
	}
	return diff, norm
}
