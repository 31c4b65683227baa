package kitchen_test

import (
	"testing"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/internal/backendtest"
	"github.com/gokitchen/kitchen/tensor"
)

// FuzzBackendsAgree builds a call of one of the operations from fuzz input
// (backendtest.FuzzCall: random shapes, adversarial values, both rounding
// modes) and checks, with the conformance suite's comparison, that every
// available backend of the default registry that implements it gives
// eager's bytes on host tensors, or the same error. A backend whose
// constraints decline host tensors is skipped; cpu must not decline. Its
// seed corpus runs with every go test; the random cases of the suite run
// in each backend's own tests.
func FuzzBackendsAgree(f *testing.F) {
	for i := range 24 {
		f.Add([]byte{byte(i * 13), byte(i * 7), 3, 200, 17, byte(i)}, uint8(i), uint8(i*5), uint16(i*41), int64(i%4)*int64(i))
	}
	f.Add([]byte{2, 0, 0, 1, 1, 0, 1, 3, 0}, uint8(1), uint8(4), uint16(257), int64(0))
	f.Add([]byte{7, 0x7f, 0xc0, 7, 0xff, 0x80}, uint8(0), uint8(2), uint16(31), int64(0)) // NaN and -Inf bits
	f.Add([]byte{4, 255, 0}, uint8(2), uint8(8), uint16(63), int64(1<<40+7))
	// Rows of 128 or more make the matrix products large, reaching the cpu
	// backend's few- and many-row paths: a dozen of them.
	for sel, added := 0, 0; sel < 256 && added < 12; sel++ {
		raw := []byte{byte(sel * 29), 5, 1, 9, byte(sel), 200, 3}
		rows, k := uint8(128+sel%128), uint16(sel*97)
		if c := backendtest.FuzzCall(raw, uint8(sel), rows, k, 0); c.Op == "mm_int8" || c.Op == "int8_linear" {
			f.Add(raw, uint8(sel), rows, k, int64(0))
			added++
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, sel, rows uint8, k uint16, seed int64) {
		c := backendtest.FuzzCall(raw, sel, rows, k, seed)
		compared := 0
		for _, b := range kitchen.ListBackends() {
			if _, ok := b.Capabilities[c.Op]; !ok || b.Name == backendtest.Reference || !b.Available || b.Disabled {
				continue
			}
			if backendtest.Agree(t, backend.Default, b.Name, tensor.CPU(), c) {
				if b.Name == "cpu" {
					t.Fatalf("cpu declined %s", c.Name)
				}
				continue
			}
			compared++
		}
		if compared == 0 {
			t.Fatalf("%s: no backend to compare with %s", c.Name, backendtest.Reference)
		}
	})
}
