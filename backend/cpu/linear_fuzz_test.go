package cpu

import (
	"math/rand/v2"
	"testing"
)

// FuzzProduct runs the int8 product on a shape, a way through the driver
// (variants) and a kernel set (VNNI form included) chosen by the fuzzer,
// against dotInt8. The shapes reach past the tiles, panels, passes of k
// and the paths' row limits that TestProductRagged's fixed list visits,
// with -128 more often than chance on both sides. Its seed corpus runs
// with every go test.
func FuzzProduct(f *testing.F) {
	for i := range 12 {
		f.Add(uint8(i*7), uint16(i*331), uint16(i*37), uint8(i*5), uint64(i))
	}
	f.Add(uint8(16), uint16(4099), uint16(100), uint8(3), uint64(7))
	f.Add(uint8(2), uint16(8193), uint16(33), uint8(40), uint64(8))
	f.Fuzz(func(t *testing.T, rows uint8, depth, cols uint16, sel uint8, seed uint64) {
		m, k, n := 1+int(rows)%72, 1+int(depth)%9000, 1+int(cols)%400
		// At most about 4M products for the reference.
		for m*n*k > 1<<22 {
			k = (k + 1) / 2
		}
		v := variants[int(sel)%len(variants)]
		set := int(sel) / len(variants)
		defer func(savedImpl int, savedVNNI bool) { impl, vnni = savedImpl, savedVNNI }(impl, vnni)
		var sets [][2]int // impl, vnni
		for _, i := range impls() {
			sets = append(sets, [2]int{i, 0})
			if hasVNNI(i) {
				sets = append(sets, [2]int{i, 1})
			}
		}
		s := sets[set%len(sets)]
		impl, vnni = s[0], s[1] == 1
		rng := rand.New(rand.NewPCG(seed, uint64(m)<<40|uint64(k)<<16|uint64(n)))
		a, w := make([]byte, m*k), make([]byte, n*k)
		for _, b := range [][]byte{a, w} {
			for i := range b {
				if b[i] = byte(rng.Uint32()); b[i]&0x70 == 0x70 {
					b[i] = 0x80 // -128, about one value in eight
				}
			}
		}
		wt := w
		if v.cols {
			wt = transpose(w, n, k)
		}
		got := multiply(t, a, wt, m, k, n, v)
		for i, g := range got {
			r, c := i/n, i%n
			if want := dotInt8(a[r*k:(r+1)*k], w[c*k:(c+1)*k]); g != want {
				t.Fatalf("%s, %s, %dx%dx%d: [%d, %d] = %d, want %d", KernelSet(), v.name, m, k, n, r, c, g, want)
			}
		}
	})
}
