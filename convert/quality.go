package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
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
// if > 0) a step at a time and compares them with x, the same rows of
// the original. Where a dequantized value is infinite it returns an
// *infiniteRow naming the first such row of x.
func (e *errorSums) add(ctx context.Context, p *producer, x, q, scale *tensor.Tensor, group int) error {
	c := p.c
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
		// The float32 rows go into the producer's buffer, the same for every
		// step (see buffers).
		if need := (r1 - r0) * k * 4; cap(p.errBuf) < need {
			p.errBuf = make([]byte, need)
		}
		into, err := tensor.FromBytes(kitchen.Float32, p.errBuf[:(r1-r0)*k*4], r1-r0, k)
		if err != nil {
			return err
		}
		var ran string
		d, err := kitchen.DequantizeInt8ConvRotWeight(ctx, qc, sc, append(c.kitchenOptions(&ran), kitchen.Into(into), kitchen.WithConvRotGroup(group))...)
		if err != nil {
			return err
		}
		c.backends[ran] = true
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
