package kitchen_test

import (
	"context"
	"fmt"

	"github.com/gokitchen/kitchen"
)

func ExampleQuantizeInt8Rowwise() {
	ctx := context.Background()
	x, _ := kitchen.FromFloat32(kitchen.BFloat16, []float32{
		1, -2, 0.5, 127,
		0, 0, 0, 0,
	}, 2, 4)
	q, scale, err := kitchen.QuantizeInt8Rowwise(ctx, x)
	if err != nil {
		fmt.Println(err)
		return
	}
	qs, _ := q.Int8s()
	ss, _ := scale.Float32s()
	fmt.Println(qs, scale.Shape(), ss)
	// Output: [1 -2 0 127 0 0 0 0] [2 1] [1 1e-30]
}

func ExampleQuantizeInt8Tensorwise() {
	ctx := context.Background()
	x, _ := kitchen.FromFloat32(kitchen.Float32, []float32{0.25, -0.5, 0.75, 1.0}, 2, 2)
	// Recalculated from the tensor's abs-max: 1.0 / 127.
	q, scale, _ := kitchen.QuantizeInt8Tensorwise(ctx, x)
	qs, _ := q.Int8s()
	ss, _ := scale.Float32s()
	fmt.Println(qs, scale.Shape(), ss)
	// A supplied scale, with stochastic rounding.
	q, scale, _ = kitchen.QuantizeInt8Tensorwise(ctx, x, kitchen.WithScale(0.01), kitchen.WithStochasticRounding(42))
	qs, _ = q.Int8s()
	ss, _ = scale.Float32s()
	fmt.Println(qs, ss)
	// Output:
	// [32 -64 95 127] [] [0.007874016]
	// [25 -50 75 100] [0.01]
}

func ExampleDequantizeInt8() {
	ctx := context.Background()
	q, _ := kitchen.FromFloat32(kitchen.Int8, []float32{-128, 0, 64, 127}, 2, 2)
	scale, _ := kitchen.FromFloat32(kitchen.Float32, []float32{0.5, 2}, 2, 1) // one per row
	out, _ := kitchen.DequantizeInt8(ctx, q, scale)
	v, _ := out.Float32s()
	fmt.Println(out.DType(), v)
	// Output: float32 [-64 0 128 254]
}

func ExampleDequantizeInt8To() {
	ctx := context.Background()
	q, _ := kitchen.FromFloat32(kitchen.Int8, []float32{1, 2, 3})
	scale, _ := kitchen.FromFloat32(kitchen.BFloat16, []float32{0.1})
	out, _ := kitchen.DequantizeInt8To(ctx, q, scale, kitchen.Float16)
	v, _ := out.Float32s()
	fmt.Println(out.DType(), v)
	// Output: float16 [0.100097656 0.20019531 0.30029297]
}

func ExampleUsingBackend() {
	ctx := context.Background()
	x, _ := kitchen.FromFloat32(kitchen.Float16, []float32{1, 2, 3})
	var ran string
	_, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.UsingBackend("eager"), kitchen.ReportBackend(&ran))
	fmt.Println(ran, err)
	_, _, err = kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.UsingBackend("nosuch"))
	fmt.Println(err)
	// Output:
	// eager <nil>
	// backend: "nosuch": no backend of that name is registered
}

func ExampleQuantizeInt8ConvRotWeight() {
	ctx := context.Background()
	// One output channel with an outlier: rotation spreads it over the
	// group, so the other weights keep more precision.
	w, _ := kitchen.FromFloat32(kitchen.BFloat16, []float32{0.01, -0.02, 0.03, 8, 0.05, -0.06, 0.07, -0.08,
		0.09, 0.1, -0.11, 0.12, 0.13, -0.14, 0.15, 0.16}, 1, 16)
	q, scale, err := kitchen.QuantizeInt8ConvRotWeight(ctx, w, kitchen.WithConvRotGroup(16))
	if err != nil {
		fmt.Println(err)
		return
	}
	back, _ := kitchen.DequantizeInt8ConvRotWeightTo(ctx, q, scale, kitchen.BFloat16, kitchen.WithConvRotGroup(16))
	v, _ := back.Float32s()
	fmt.Println(q.Shape(), scale.Shape())
	fmt.Printf("%.3f\n", v)
	// Output:
	// [1 16] [1 1]
	// [0.009 -0.017 0.026 8.000 0.052 -0.060 0.069 -0.078 0.095 0.104 -0.112 0.121 0.121 -0.146 0.155 0.164]
}

func ExampleInto() {
	ctx := context.Background()
	// Buffers made once and reused by every call: no allocation per call.
	q, _ := kitchen.FromBytes(kitchen.Int8, make([]byte, 4), 2, 2)
	scale, _ := kitchen.FromBytes(kitchen.Float32, make([]byte, 8), 2, 1)
	for _, v := range [][]float32{{1, -2, 3, 4}, {-8, 4, 2, 1}} {
		x, _ := kitchen.FromFloat32(kitchen.Float32, v, 2, 2)
		gotQ, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.Into(q, scale))
		if err != nil {
			fmt.Println(err)
			return
		}
		qs, _ := q.Int8s()
		fmt.Println(gotQ == q, qs)
	}
	// An output of the wrong shape is refused, naming it.
	bad, _ := kitchen.FromBytes(kitchen.Int8, make([]byte, 4), 4)
	x, _ := kitchen.FromFloat32(kitchen.Float32, []float32{1, 2, 3, 4}, 2, 2)
	_, _, err := kitchen.QuantizeInt8Rowwise(ctx, x, kitchen.Into(bad, nil))
	fmt.Println(err)
	// Output:
	// true [64 -127 95 127]
	// true [-127 64 127 64]
	// kitchen: quantize_int8_rowwise: out_q: bad shape: shape [4], want [2 2]
}

func ExampleMMInt8() {
	// a [2, 3] by b [3, 2], exact in int32; -128 is a value like any other.
	a, _ := kitchen.FromFloat32(kitchen.Int8, []float32{1, 2, 3, -128, 0, 127}, 2, 3)
	b, _ := kitchen.FromFloat32(kitchen.Int8, []float32{-128, 1, -128, 0, 4, -1}, 3, 2)
	c, err := kitchen.MMInt8(context.Background(), a, b)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := c.Int32s()
	fmt.Println(c.DType(), c.Shape(), v)
	// Output:
	// int32 [2 2] [-372 -2 16892 -255]
}

func ExampleDequantizeInt8Embedding() {
	// A table of 3 rows of 2, one scale a row, looked up at indices 2 and 0.
	q, _ := kitchen.FromFloat32(kitchen.Int8, []float32{1, 2, 3, 4, 5, -6}, 3, 2)
	scale, _ := kitchen.FromFloat32(kitchen.Float32, []float32{0.5, 1, 2}, 3, 1)
	idx, _ := kitchen.FromFloat32(kitchen.Int64, []float32{2, 0}, 2)
	out, err := kitchen.DequantizeInt8Embedding(context.Background(), q, scale, idx, kitchen.BFloat16)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := out.Float32s()
	fmt.Println(out.DType(), out.Shape(), v)
	// An index outside the table is an error naming it.
	idx, _ = kitchen.FromFloat32(kitchen.Int64, []float32{3}, 1)
	_, err = kitchen.DequantizeInt8Embedding(context.Background(), q, scale, idx, kitchen.BFloat16)
	fmt.Println(err != nil)
	// Output:
	// bfloat16 [2 2] [10 -12 0.5 1]
	// true
}

func ExampleInt8Linear() {
	// One row of x through a layer of 2 output channels over K = 4, with
	// one scale per channel and a bias, out in float32.
	x, _ := kitchen.FromFloat32(kitchen.BFloat16, []float32{0.5, -1, 0.25, 2}, 1, 4)
	w, _ := kitchen.FromFloat32(kitchen.Int8, []float32{10, 20, -30, 40, -128, 127, 0, 1}, 2, 4)
	ws, _ := kitchen.FromFloat32(kitchen.Float32, []float32{0.01, 0.02}, 2, 1)
	bias, _ := kitchen.FromFloat32(kitchen.Float32, []float32{1, -1}, 2)
	y, err := kitchen.Int8Linear(context.Background(), x, w, ws, kitchen.WithBias(bias), kitchen.WithOutDType(kitchen.Float32))
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := y.Float32s()
	fmt.Printf("%v %.4f\n", y.Shape(), v)
	// x quantizes to [32 -64 16 127] with scale 2/127, whose int32 dot
	// products with w's rows are 3640 and -12097; y[n] is that times 2/127
	// times ws[n], plus bias[n].

	// Output:
	// [1 2] [1.5732 -4.8101]
}
