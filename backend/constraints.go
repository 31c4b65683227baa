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
	// not checked.
	DTypes []DTypeRule
	// Shapes are rules on the shapes of tensor parameters.
	Shapes []ShapeRule
	// Calls are rules over the whole call, such as "stochastic rounding off".
	Calls []CallRule
	// Hardware are rules on the device itself, such as a SoC or compute
	// capability.
	Hardware []HardwareRule
}

// DTypeRule lists the dtypes accepted for one parameter.
type DTypeRule struct {
	Param  string
	DTypes []dtype.DType
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
	OK    func(a Args) bool
}

// StochasticRoundingOff declines calls that ask for stochastic rounding.
func StochasticRoundingOff() CallRule {
	return CallRule{"stochastic_rounding", "off", func(a Args) bool {
		s, ok := a.(Stochastic)
		return !ok || !s.Stochastic()
	}}
}

// HardwareRule is a predicate on the device a call runs on.
type HardwareRule struct {
	Desc string
	OK   func(dev tensor.Device) bool
}

// Check returns nil if the constraints accept the call, or the first
// failing parameter and the reason.
func (cs *Constraints) Check(a Args) *Decline {
	dev := a.Device()
	if len(cs.Devices) > 0 && (dev == nil || !slices.Contains(cs.Devices, dev.Type())) {
		return &Decline{Param: "device", Reason: fmt.Sprintf("%v not in [%s]", dev, strings.Join(cs.Devices, ", "))}
	}
	for _, r := range cs.DTypes {
		got, ok := a.DType(r.Param)
		if ok && !slices.Contains(r.DTypes, got) {
			return &Decline{Param: r.Param, Reason: fmt.Sprintf("dtype %v not in %s", got, dtypeList(r.DTypes))}
		}
	}
	for _, r := range cs.Shapes {
		if t := a.Tensor(r.Param); t != nil && !r.OK(t.Shape()) {
			return &Decline{Param: r.Param, Reason: fmt.Sprintf("shape %v fails %s", t.Shape(), r.Desc)}
		}
	}
	for _, r := range cs.Calls {
		if !r.OK(a) {
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
	for _, r := range cs.DTypes {
		out = append(out, r.Param+": "+dtypeList(r.DTypes))
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
