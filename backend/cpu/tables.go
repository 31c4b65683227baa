package cpu

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/gokitchen/kitchen/dtype"
)

// Lookup tables for the portable kernels. With one divisor or one scale
// for a long run, a 16-bit input has at most 65,536 quotients and an int8
// input 256 products, so the Go kernels compute each once, with the very
// loops they would run per element (identical results by construction),
// and then only look them up. The assembly kernels do not need them.

// quantTableMin is the shortest run of float16 or bfloat16 that a
// deterministic Go quantize looks up: a table costs 65,536 quotients to
// build, and is reused by the next run with the same dtype and divisor
// (the parts of one tensor-wise pass).
const quantTableMin = 1 << 16

// dequantTableMin is the shortest run that a Go dequantize looks up in a
// table of 256 products (a row of a row-wise scale, say).
const dequantTableMin = 1024

// quantTable holds int8(round(rT(x / t))) for every 16-bit pattern x of dt.
type quantTable struct {
	dt  dtype.DType
	t   uint32 // the divisor's bits
	tab [1 << 16]byte
}

var quantTables sync.Pool // of *quantTable

// patterns16 is every 16-bit pattern, little-endian, in order.
var patterns16 = sync.OnceValue(func() []byte {
	b := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i))
	}
	return b
})

// quantizeLookup is quantizeDirect for a 16-bit dt without noise, through a
// table of every pattern's quotient.
func quantizeLookup(dt dtype.DType, src, dst []byte, t float32) {
	qt, _ := quantTables.Get().(*quantTable)
	if qt == nil {
		qt = new(quantTable)
	}
	if qt.dt != dt || qt.t != math.Float32bits(t) {
		quantizeDirect(dt, patterns16(), qt.tab[:], t)
		qt.dt, qt.t = dt, math.Float32bits(t)
	}
	tab := &qt.tab
	// Eight elements a step, in whole words: per-element slicing of src
	// and dst costs more than the lookups.
	src = src[:2*len(dst)]
	for len(dst) >= 8 {
		a, b := binary.LittleEndian.Uint64(src), binary.LittleEndian.Uint64(src[8:16])
		binary.LittleEndian.PutUint64(dst, uint64(tab[uint16(a)])|uint64(tab[uint16(a>>16)])<<8|
			uint64(tab[uint16(a>>32)])<<16|uint64(tab[uint16(a>>48)])<<24|
			uint64(tab[uint16(b)])<<32|uint64(tab[uint16(b>>16)])<<40|
			uint64(tab[uint16(b>>32)])<<48|uint64(tab[uint16(b>>48)])<<56)
		src, dst = src[16:], dst[8:]
	}
	for j := range dst {
		dst[j] = tab[binary.LittleEndian.Uint16(src[2*j:])]
	}
	quantTables.Put(qt)
}

// patterns8 is every int8 value, as bytes 0 to 255.
var patterns8 = func() (b [256]byte) {
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// dequantizeLookup is dequantizeDirect through a table of the 256
// products.
func dequantizeLookup(out dtype.DType, q []byte, s float32, dst []byte) {
	var tab [256 * 4]byte
	dequantizeDirect(out, patterns8[:], s, tab[:256*out.Size()])
	switch out.Size() {
	case 2:
		var t16 [256]uint16
		for i := range t16 {
			t16[i] = binary.LittleEndian.Uint16(tab[2*i:])
		}
		dst = dst[:2*len(q)]
		for len(q) >= 8 {
			v := binary.LittleEndian.Uint64(q)
			binary.LittleEndian.PutUint64(dst, uint64(t16[byte(v)])|uint64(t16[byte(v>>8)])<<16|
				uint64(t16[byte(v>>16)])<<32|uint64(t16[byte(v>>24)])<<48)
			binary.LittleEndian.PutUint64(dst[8:16], uint64(t16[byte(v>>32)])|uint64(t16[byte(v>>40)])<<16|
				uint64(t16[byte(v>>48)])<<32|uint64(t16[byte(v>>56)])<<48)
			q, dst = q[8:], dst[16:]
		}
		for j, b := range q {
			binary.LittleEndian.PutUint16(dst[2*j:], t16[b])
		}
	default:
		var t32 [256]uint32
		for i := range t32 {
			t32[i] = binary.LittleEndian.Uint32(tab[4*i:])
		}
		dst = dst[:4*len(q)]
		for len(q) >= 8 {
			v := binary.LittleEndian.Uint64(q)
			d := dst[:32]
			binary.LittleEndian.PutUint64(d, uint64(t32[byte(v)])|uint64(t32[byte(v>>8)])<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(t32[byte(v>>16)])|uint64(t32[byte(v>>24)])<<32)
			binary.LittleEndian.PutUint64(d[16:], uint64(t32[byte(v>>32)])|uint64(t32[byte(v>>40)])<<32)
			binary.LittleEndian.PutUint64(d[24:], uint64(t32[byte(v>>48)])|uint64(t32[byte(v>>56)])<<32)
			q, dst = q[8:], dst[32:]
		}
		for j, b := range q {
			binary.LittleEndian.PutUint32(dst[4*j:], t32[b])
		}
	}
}
