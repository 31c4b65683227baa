package convert

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"sync"

	"github.com/gokitchen/kitchen"
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

// add dequantizes q and scale (rows of a layer, rotating back with group,
// if > 0) a step at a time and compares them with x, the same rows of
// the original.
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
		var d *tensor.Tensor
		opts := append(c.kitchenOptions(&ran), kitchen.Into(into))
		if group > 0 {
			d, err = kitchen.DequantizeInt8ConvRotWeight(ctx, qc, sc, append(opts, kitchen.WithConvRotGroup(group))...)
		} else {
			d, err = kitchen.DequantizeInt8(ctx, qc, sc, opts...)
		}
		if err != nil {
			return err
		}
		c.backends[ran] = true
		db, err := d.Bytes()
		if err != nil {
			return err
		}
		dd, nn := sumSquares(x.DType(), xb[r0*k*es:r1*k*es], db)
		e.diff, e.norm = e.diff+dd, e.norm+nn
	}
	return nil
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
// summed in parallel, each in a fixed order, and the block sums in block
// order, so the result does not depend on the number of processors.
func sumSquares(dt dtype.DType, xb, db []byte) (diff, norm float64) {
	n, es := len(db)/4, dt.Size()
	blocks := (n + sumBlock - 1) / sumBlock
	sums := make([][2]float64, blocks)
	workers := min(runtime.GOMAXPROCS(0), blocks)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := w; b < blocks; b += workers {
				lo, hi := b*sumBlock, min(n, (b+1)*sumBlock)
				sums[b] = blockSquares(dt, xb[es*lo:es*hi], db[4*lo:4*hi])
			}
		})
	}
	wg.Wait()
	for _, s := range sums {
		diff, norm = diff+s[0], norm+s[1]
	}
	return diff, norm
}

// blockSquares returns Σ(d - x)² and Σx² over one block, in four
// interleaved sums added in a fixed order. The sums are plain locals, not
// updated through pointers, so they stay in registers (three times faster
// than a helper taking pointers to them).
func blockSquares(dt dtype.DType, xb, db []byte) [2]float64 {
	var e0, e1, e2, e3, s0, s1, s2, s3 float64
	f32 := func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	bf16 := func(b []byte) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	}
	switch dt {
	case dtype.BFloat16:
		for len(xb) >= 8 && len(db) >= 16 {
			x0, x1, x2, x3 := bf16(xb[0:2]), bf16(xb[2:4]), bf16(xb[4:6]), bf16(xb[6:8])
			r0, r1, r2, r3 := f32(db[0:4])-x0, f32(db[4:8])-x1, f32(db[8:12])-x2, f32(db[12:16])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			xb, db = xb[8:], db[16:]
		}
	case dtype.Float32:
		for len(xb) >= 16 && len(db) >= 16 {
			x0, x1, x2, x3 := f32(xb[0:4]), f32(xb[4:8]), f32(xb[8:12]), f32(xb[12:16])
			r0, r1, r2, r3 := f32(db[0:4])-x0, f32(db[4:8])-x1, f32(db[8:12])-x2, f32(db[12:16])-x3
			e0, e1, e2, e3 = e0+float64(r0*r0), e1+float64(r1*r1), e2+float64(r2*r2), e3+float64(r3*r3)
			s0, s1, s2, s3 = s0+float64(x0*x0), s1+float64(x1*x1), s2+float64(x2*x2), s3+float64(x3*x3)
			xb, db = xb[16:], db[16:]
		}
	}
	for i := range len(db) / 4 {
		x := float64(dtype.Load(xb, dt, i))
		r := f32(db[4*i:]) - x
		e0, s0 = e0+float64(r*r), s0+float64(x*x)
	}
	return [2]float64{(e0 + e1) + (e2 + e3), (s0 + s1) + (s2 + s3)}
}
