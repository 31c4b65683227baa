package backend

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// Constraints say which calls of one operation a backend accepts. They are
// data, checked before the backend is called, and each part describes
// itself in words for ListBackends and for refusals. The zero value accepts
// every call.
type Constraints struct {
	// Devices lists the device types accepted ("cpu", "npu"); empty accepts any.
	Devices []string
	// DTypes lists, per parameter ("x", "q", "scale", "out_dtype"), the
	// accepted dtypes. A parameter not listed, or absent from the call, is
	// not checked; other keys are ignored.
	DTypes map[string][]dtype.DType
	// Shapes are rules on the shapes of tensor parameters.
	Shapes []ShapeRule
	// Calls are rules over the whole call, such as "stochastic rounding off".
	Calls []CallRule
	// Hardware are rules on the device itself, such as a SoC or compute
	// capability.
	Hardware []HardwareRule
}

// ShapeRule is a predicate on the shape of one tensor parameter.
type ShapeRule struct {
	Param string
	Desc  string
	OK    func(shape []int) bool
}

// ExactRank requires param to have exactly n dimensions.
func ExactRank(param string, n int) ShapeRule {
	return ShapeRule{param, fmt.Sprintf("rank == %d", n), func(s []int) bool { return len(s) == n }}
}

// MinRank requires param to have at least n dimensions.
func MinRank(param string, n int) ShapeRule {
	return ShapeRule{param, fmt.Sprintf("rank >= %d", n), func(s []int) bool { return len(s) >= n }}
}

// DimDivisibleBy requires dimension dim of param (negative counts from the
// end) to be a multiple of n.
func DimDivisibleBy(param string, dim, n int) ShapeRule {
	return ShapeRule{param, fmt.Sprintf("dim %d divisible by %d", dim, n), func(s []int) bool {
		i := dim
		if i < 0 {
			i += len(s)
		}
		return i >= 0 && i < len(s) && s[i]%n == 0
	}}
}

// CallRule is a predicate over a whole call.
type CallRule struct {
	// Param names what the rule is about, for refusals.
	Param string
	Desc  string
	OK    func(c *Call) bool
}

// StochasticRoundingOff declines calls that ask for stochastic rounding.
func StochasticRoundingOff() CallRule {
	return CallRule{ParamStochasticRounding, "off", func(c *Call) bool { return !c.Stochastic() }}
}

// HardwareRule is a predicate on the device a call runs on.
type HardwareRule struct {
	Desc string
	OK   func(dev tensor.Device) bool
}

// Check returns nil if the constraints accept the call, or the first
// failing parameter and the reason.
func (cs *Constraints) Check(c *Call) *Decline {
	dev := c.Device()
	if len(cs.Devices) > 0 && (dev == nil || !slices.Contains(cs.Devices, dev.Type())) {
		return &Decline{Param: "device", Reason: fmt.Sprintf("%v not in [%s]", dev, strings.Join(cs.Devices, ", "))}
	}
	for _, param := range dtypeParams {
		allowed, ok := cs.DTypes[param]
		if !ok {
			continue
		}
		var got dtype.DType
		if param == ParamOutDType {
			got = c.OutDType
		} else if t := c.Tensor(param); t != nil {
			got = t.DType()
		} else {
			continue
		}
		if !slices.Contains(allowed, got) {
			return &Decline{Param: param, Reason: fmt.Sprintf("dtype %v not in %s", got, dtypeList(allowed))}
		}
	}
	for _, r := range cs.Shapes {
		if t := c.Tensor(r.Param); t != nil && !r.OK(t.Shape()) {
			return &Decline{Param: r.Param, Reason: fmt.Sprintf("shape %v fails %s", t.Shape(), r.Desc)}
		}
	}
	for _, r := range cs.Calls {
		if !r.OK(c) {
			return &Decline{Param: r.Param, Reason: "requires " + r.Desc}
		}
	}
	for _, r := range cs.Hardware {
		if !r.OK(dev) {
			return &Decline{Param: "hardware", Reason: fmt.Sprintf("%v fails %s", dev, r.Desc)}
		}
	}
	return nil
}

// Describe lists the constraints in words, one line each.
func (cs *Constraints) Describe() []string {
	var out []string
	if len(cs.Devices) > 0 {
		out = append(out, "devices: "+strings.Join(cs.Devices, ", "))
	} else {
		out = append(out, "devices: any")
	}
	for _, param := range dtypeParams {
		if allowed, ok := cs.DTypes[param]; ok {
			out = append(out, param+": "+dtypeList(allowed))
		}
	}
	for _, r := range cs.Shapes {
		out = append(out, r.Param+": "+r.Desc)
	}
	for _, r := range cs.Calls {
		out = append(out, r.Param+": "+r.Desc)
	}
	for _, r := range cs.Hardware {
		out = append(out, "hardware: "+r.Desc)
	}
	return out
}

func dtypeList(ds []dtype.DType) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// dtypeParams are the parameters DTypes may name, in the order they are
// checked and described.
var dtypeParams = []string{ParamX, ParamQ, ParamScale, ParamOutDType}
