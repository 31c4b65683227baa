// Package golden reads the golden vectors computed by PyTorch, an
// implementation of the contract independent of kitchen's, for every
// backend's tests: testdata/golden/int8.json (INT8 Q/DQ,
// tools/golden/gen_golden.py), testdata/golden/convrot.json (the ConvRot
// operations, tools/golden/gen_convrot.py) and testdata/golden/linear.json
// (mm_int8 and int8_linear, tools/golden/gen_linear.py).
package golden

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gokitchen/kitchen/dtype"
)

// Case is one vector. Quantize cases fill DType, Shape, X, Seed, ScaleMode
// ("recalculate", "value" or "tensor"), ScaleValue, Q, Scale and
// ScaleShape; dequantize cases fill Q, QShape, Scale, ScaleDType,
// ScaleShape, OutDType and Out. Byte fields are little-endian.
//
// ConvRot cases (convrot.json) also fill Group, the rotation's group size
// (0 for an embedding without rotation). Their quantize cases
// (quantize_int8_convrot_weight, quantize_and_rotate_rowwise) fill DType,
// Shape, X, Seed, Q, QShape, Scale (float32), ScaleDType and ScaleShape
// from PyTorch's matrix-product rotation, and QButterfly and
// ScaleButterfly from kitchen's radix-4 summation order. Their dequantize
// cases (dequantize_int8_convrot_weight[_dtype], dequantize_int8_embedding)
// fill Q, QShape, Scale, ScaleDType, ScaleShape, OutDType, OutShape, Out
// (matrix product) and OutButterfly (kitchen's order); embeddings also fill
// Indices, IndicesDType (int32 or int64) and IndicesShape. ButterflyEqual
// tells whether the two orders gave the same float32 rotated values.
//
// linear.json: mm_int8 cases fill A (int8) with AShape [M,K], B (int8)
// with BShape [K,N], and Out (int32), OutShape [M,N], OutDType (int32);
// DType is int8. int8_linear cases fill DType (x's dtype), Shape (x's
// shape, swiglu's [gate | up] included), X, Weight (int8) with WeightShape
// [N,K], WeightScale with WeightScaleDType and WeightScaleShape ([], [1],
// [N] or [N,1]), Bias with BiasDType and BiasShape [N] (all three empty: no
// bias), Group (convrot_groupsize; 0 without ConvRot; the rotation is
// kitchen's butterfly order), InputAct ("", "gelu_tanh" or "swiglu"), XQ
// (int8 [M,K]) and XS (float32 [M,1]), the activation quantized after
// the activation and rotation steps, and Out, OutShape [..., N], OutDType.
type Case struct {
	Name       string      `json:"name"`
	Op         string      `json:"op"`
	DType      dtype.DType `json:"dtype"`
	Shape      []int       `json:"shape"`
	X          Hex         `json:"x"`
	Seed       int64       `json:"seed"`
	ScaleMode  string      `json:"scale_mode"`
	ScaleValue float32     `json:"scale_value"`
	Q          Hex         `json:"q"`
	QShape     []int       `json:"q_shape"`
	Scale      Hex         `json:"scale"`
	ScaleDType dtype.DType `json:"scale_dtype"`
	ScaleShape []int       `json:"scale_shape"`
	OutDType   dtype.DType `json:"out_dtype"`
	Out        Hex         `json:"out"`

	Group          int         `json:"group"`
	Indices        Hex         `json:"indices"`
	IndicesDType   dtype.DType `json:"indices_dtype"`
	IndicesShape   []int       `json:"indices_shape"`
	OutShape       []int       `json:"out_shape"`
	ButterflyEqual bool        `json:"butterfly_equal"`
	QButterfly     Hex         `json:"q_butterfly"`
	ScaleButterfly Hex         `json:"scale_butterfly"`
	OutButterfly   Hex         `json:"out_butterfly"`

	A                Hex         `json:"a"`
	AShape           []int       `json:"a_shape"`
	B                Hex         `json:"b"`
	BShape           []int       `json:"b_shape"`
	Weight           Hex         `json:"weight"`
	WeightShape      []int       `json:"weight_shape"`
	WeightScale      Hex         `json:"weight_scale"`
	WeightScaleDType dtype.DType `json:"weight_scale_dtype"`
	WeightScaleShape []int       `json:"weight_scale_shape"`
	Bias             Hex         `json:"bias"`
	BiasDType        dtype.DType `json:"bias_dtype"`
	BiasShape        []int       `json:"bias_shape"`
	InputAct         string      `json:"input_act"`
	XQ               Hex         `json:"xq"`
	XS               Hex         `json:"xs"`
}

// Hex is bytes written as a hex string in the JSON.
type Hex []byte

// UnmarshalText decodes the hex string.
func (h *Hex) UnmarshalText(b []byte) error {
	v, err := hex.DecodeString(string(b))
	*h = v
	return err
}

// Load reads the vectors from path.
func Load(path string) ([]Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Cases []Case `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return file.Cases, nil
}
