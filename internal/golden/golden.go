// Package golden reads testdata/golden/int8.json: INT8 Q/DQ vectors
// computed by PyTorch (tools/golden/gen_golden.py), an implementation of
// the contract independent of kitchen's, for every backend's tests.
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
