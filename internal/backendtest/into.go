package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// into checks caller-owned outputs on random cases of op: the call writes
// the caller's tensors (filled with a pattern first, so a kernel that skips
// an element is caught), returns them, and gives what a fresh call gives;
// a nil entry gets a fresh tensor; and outputs of the wrong shape or dtype,
// or that share memory with an input, are refused naming the parameter.
func (e *env) into(t *testing.T, op string, cs *cases) {
	tl := e.tally(op)
	h := fnv.New64a()
	h.Write([]byte(op + "/into"))
	rng := rand.New(rand.NewPCG(h.Sum64(), 3))
	for _, dt := range dtype.Floats() {
		for range max(2, e.cfg.random/8) {
			c := cs.random(randomGen(rng, dt, false))
			fresh := e.exec(t, c, e.name, e.dev)
			tl.count(t, c, fresh.declined, fresh.err)
			if fresh.declined || fresh.err != nil {
				continue
			}
			for _, keep := range []int{-1, 0} { // all given; only the first
				outs := make([]*tensor.Tensor, len(fresh.out))
				for i, o := range fresh.out {
					if keep < 0 || i == keep {
						outs[i] = patterned(t, o, e.dev)
					}
				}
				ci := c
				ci.Name, ci.Out = fmt.Sprintf("%s into %d given outputs", c.Name, len(outs)), outs
				got := e.exec(t, ci, e.name, e.dev)
				for i, x := range outs {
					if x != nil && got.err == nil {
						got.out[i] = readBack(t, x)
					}
				}
				for _, x := range outs {
					x.Release()
				}
				switch {
				case got.err != nil:
					t.Errorf("%s: %v", ci.Name, got.err)
				default:
					if msg := diffOutputs(got.out, fresh.out, op, nil); msg != "" {
						t.Errorf("%s: not what a fresh call gives: %s", ci.Name, msg)
					}
				}
			}
			e.badInto(t, tl, c, fresh.out)
			if t.Failed() {
				return
			}
		}
	}
	tl.check(t, "into")
}

// badInto checks that outputs of the wrong shape or dtype, or aliasing an
// input (on the host, where memory can be shared), are refused.
func (e *env) badInto(t *testing.T, tl *tally, c Call, want []output) {
	param := "out"
	if len(want) == 2 {
		param = "out_q"
	}
	first := want[0]
	wrongShape := first
	wrongShape.Shape = append([]int{1}, first.Shape...)
	wrongShape.Bytes = first.Bytes
	wrongDType := first
	wrongDType.DType = dtype.Int8
	if first.DType == dtype.Int8 {
		wrongDType.DType = dtype.Uint8
	}
	wrongDType.Bytes = make([]byte, tensor.Numel(first.Shape))
	for _, b := range []struct {
		what string
		o    output
		err  error
	}{{"shape", wrongShape, tensor.ErrShape}, {"dtype", wrongDType, backend.ErrDType}} {
		outs := make([]*tensor.Tensor, len(want))
		outs[0] = patterned(t, b.o, e.dev)
		bc := badCall{Call: c, param: param, err: b.err, row: -1}
		bc.Name, bc.Out = fmt.Sprintf("%s into an output of the wrong %s", c.Name, b.what), outs
		e.fails(t, tl, bc)
		outs[0].Release()
	}
	if e.dev != tensor.CPU() {
		return
	}
	// An output over an input's bytes: the inputs of every operation are at
	// least as large as its first output, except where they are not; take
	// the largest input and skip the case if it is too small.
	need := tensor.Numel(first.Shape) * first.DType.Size()
	for _, x := range c.In {
		if x == nil || x.Nbytes() < need {
			continue
		}
		over, err := tensor.FromBytes(first.DType, must(x.Bytes())[:need], append([]int{}, first.Shape...)...)
		if err != nil {
			t.Fatal(err)
		}
		outs := make([]*tensor.Tensor, len(want))
		outs[0] = over
		bc := badCall{Call: c, param: param, err: backend.ErrAlias, row: -1}
		bc.Name, bc.Out = c.Name+" into an output over an input", outs
		e.fails(t, tl, bc)
		return
	}
}

// patterned makes a tensor of o's dtype and shape on dev, every byte 0xA5.
func patterned(t *testing.T, o output, dev tensor.Device) *tensor.Tensor {
	shape := append([]int{}, o.Shape...) // not nil: a scalar stays one
	h, err := tensor.FromBytes(o.DType, bytes.Repeat([]byte{0xA5}, len(o.Bytes)), shape...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.To(dev)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// readBack reads a tensor to the host.
func readBack(t *testing.T, x *tensor.Tensor) output {
	h, err := x.To(tensor.CPU())
	if err != nil {
		t.Fatal(errors.Join(fmt.Errorf("reading a caller-owned output back"), err))
	}
	return output{DType: h.DType(), Shape: h.Shape(), Bytes: bytes.Clone(must(h.Bytes()))}
}
