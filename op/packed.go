package op

import (
	"errors"
	"sync"

	"github.com/gokitchen/kitchen/tensor"
)

// Errors of a prepared int8_linear weight, wrapped in a *backend.ArgError
// on the "weight" parameter.
var (
	// ErrPacked: LinearArgs.Packed was made for another weight tensor.
	ErrPacked = errors.New("op: packed weight made for another weight")
	// ErrReleased: the packed weight (or the layer holding it) was
	// released.
	ErrReleased = errors.New("op: packed weight released")
)

// PackedWeight carries backends' own layouts of one int8_linear weight
// from call to call, for a layer that is called many times
// (kitchen.PrepareInt8Linear makes one). Set LinearArgs.Packed to it, with
// LinearArgs.Weight the very tensor it was made for (Validate checks):
// the backend that runs the call may store its layout of the weight in it
// the first time (Layout) and read that instead of Weight on later calls;
// every other backend reads Weight as usual, so a call never meets a
// layout that its backend did not make.
//
// A layout is a copy, made once: the weight's contents must not change
// while the PackedWeight is in use (kitchen's operations never modify
// their inputs; only writing to the bytes a host tensor was made from, as
// tensor.FromBytes allows, can). A PackedWeight is safe for concurrent
// use; Release frees its layouts, after which calls with it fail with
// ErrReleased.
type PackedWeight struct {
	weight *tensor.Tensor

	mu       sync.Mutex
	released bool
	layouts  map[string]*packedLayout
}

// packedLayout is one backend's layout, made once.
type packedLayout struct {
	mu sync.Mutex // held while it is made
	v  any
}

// NewPackedWeight returns an empty PackedWeight for weight (int8 [N, K]).
func NewPackedWeight(weight *tensor.Tensor) *PackedWeight {
	return &PackedWeight{weight: weight, layouts: map[string]*packedLayout{}}
}

// Weight returns the tensor the PackedWeight was made for.
func (p *PackedWeight) Weight() *tensor.Tensor { return p.weight }

// Layout returns the layout stored under key, making it with make the
// first time. The key names the backend and whatever else its layout
// depends on (a kernel set's panel width, say), so that a layout is only
// read by code that made one like it. Concurrent calls with one key wait
// for the first; an error from make is returned and nothing is stored, so
// a later call tries again. After Release it returns int8_linear's
// argument error on "weight" wrapping ErrReleased (a layer released while a
// call was under way).
func (p *PackedWeight) Layout(key string, build func() (any, error)) (any, error) {
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return nil, argError(Int8Linear.Name(), "weight", ErrReleased, "the packed weight was released")
	}
	l := p.layouts[key]
	if l == nil {
		l = &packedLayout{}
		p.layouts[key] = l
	}
	p.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.v == nil {
		v, err := build()
		if err != nil {
			return nil, err
		}
		l.v = v
	}
	return l.v, nil
}

// Released reports whether Release was called.
func (p *PackedWeight) Released() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}

// Release drops every layout (calls running with one finish with it).
// Later calls with p fail with ErrReleased.
func (p *PackedWeight) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released, p.layouts = true, nil
}
