package cpu

import (
	"context"
	"fmt"

	"github.com/gokitchen/kitchen/op"
)

// A prepared int8_linear weight (op.PackedWeight): the weight [N, K] in
// panels of gemmCols channels, as the tiles read them, but with each pair
// of k as two int8 values instead of two int16 (the tiles sign-extend them
// as they load): the same size as the weight, and no call packs
// anything. The one-row and dot paths read the plain weight instead (see
// linearPath). The panels' width is the kernel set's, so the layout is
// stored under a key that names it: a call under another kernel set
// (tests change it) makes its own rather than misreading this one.

// Where the panel paths multiply quads of k (quadPanels), the panels are
// quad panels instead: per quad of k, each channel's four values plus 128,
// as unsigned bytes.

// preparedLayout is the cpu backend's layout of a prepared weight.
type preparedLayout struct {
	nr, k, n int
	quads    bool
	panels   []byte // [ceil(N/nr)][kp][nr][2] int8, zero past N and past an odd K; quads: [ceil(N/nr)][kq][nr][4]
}

// preparedKey is the key of the layout for the kernel set in use.
func preparedKey() string {
	if quadPanels() {
		return fmt.Sprintf("%s/int8-quads-%d", Name, gemmCols())
	}
	return fmt.Sprintf("%s/int8-panels-%d", Name, gemmCols())
}

// preparedPanels returns the call's prepared weight's panels, packing
// them the first time, or nil when the call has none.
func preparedPanels(ctx context.Context, a *op.LinearArgs, w []byte) ([]byte, error) {
	if a.Packed == nil {
		return nil, nil
	}
	k, n := a.Weight.Dim(1), a.Weight.Dim(0)
	v, err := a.Packed.Layout(preparedKey(), func() (any, error) { return packPrepared(ctx, w, k, n) })
	if err != nil {
		return nil, err
	}
	l := v.(*preparedLayout)
	if l.nr != gemmCols() || l.quads != quadPanels() || l.k != k || l.n != n {
		// Cannot happen (the key and the weight fix them); a layout that
		// does not fit is ignored, never misread.
		return nil, nil
	}
	return l.panels, nil
}

// packPrepared packs an [n, k] int8 weight into the prepared layout.
func packPrepared(ctx context.Context, w []byte, k, n int) (*preparedLayout, error) {
	nr, quads := gemmCols(), quadPanels()
	kp, unit := max(1, (k+1)/2), 2*nr
	if quads {
		kp, unit = max(1, (k+3)/4), 4*nr
	}
	panels := roundUp(n, nr) / nr
	l := &preparedLayout{nr: nr, k: k, n: n, quads: quads, panels: make([]byte, panels*kp*unit)}
	b := &packBody{src: w, dst: l.panels, k: k, n: n, kp: kp, i8: !quads, quads: quads}
	if err := parallelFor(ctx, b, panels, max(1, grainBytes/max(1, nr*k))); err != nil {
		return nil, err
	}
	return l, nil
}
