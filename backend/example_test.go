package backend_test

import (
	"context"
	"fmt"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Declare an operation once; backends implement it with a kernel of its
// exact argument and result types; the registry dispatches it by
// constraints like any other.
func ExampleDeclare() {
	// doubleArgs and doubled are this package's test types; kitchen's own
	// operations declare theirs in package op.
	halve := backend.Declare[*doubleArgs, doubled]("example_halve", nil)

	reg := backend.NewRegistry(nil)
	_ = reg.Register(backend.Backend{Name: "bf16only", Kind: backend.Host, Caps: []backend.Capability{
		halve.Implement(backend.Constraints{
			DTypes: []backend.DTypeRule{{Param: "x", DTypes: []dtype.DType{dtype.BFloat16}}},
		}, func(_ context.Context, a *doubleArgs) (doubled, error) {
			v, _ := a.X.Float32s()
			for i := range v {
				v[i] /= 2
			}
			out, err := tensor.FromFloat32(dtype.Float32, v)
			return doubled{out}, err
		}),
	}})

	x, _ := tensor.FromFloat32(dtype.BFloat16, []float32{1, 2, 3})
	res, ran, err := halve.Run(context.Background(), reg, &doubleArgs{X: x}, "")
	v, _ := res.Out.Float32s()
	fmt.Println(v, ran, err)

	x16, _ := tensor.FromFloat32(dtype.Float16, []float32{1})
	_, _, err = halve.Run(context.Background(), reg, &doubleArgs{X: x16}, "")
	fmt.Println(err)
	// Output:
	// [0.5 1 1.5] bf16only <nil>
	// backend: no backend can run example_halve on cpu
	//   bf16only: x: dtype float16 not in [bfloat16]
}
