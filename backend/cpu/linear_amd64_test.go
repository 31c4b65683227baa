//go:build amd64 && !purego

package cpu

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	xcpu "golang.org/x/sys/cpu"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
)

// TestLinearPathQuads checks int8_linear's choice of layout where the
// panels hold quads (AVX512-VNNI), and with AVX-512 without them: no dot
// path; the few-row path from gemvMax+1 rows.
func TestLinearPathQuads(t *testing.T) {
	defer func(i int, v bool) { impl, vnni = i, v }(impl, vnni)
	impl = implAVX512
	for _, vnni = range []bool{true, false} {
		for _, c := range []struct{ m, want int }{{1, oneRow}, {8, oneRow}, {9, fewRows}, {16, fewRows}, {48, fewRows}, {96, fewRows}, {97, manyRows}} {
			if got := linearPath(c.m, 4096, false); got != c.want {
				t.Errorf("%d rows of 4096, VNNI %v: path %d, want %d", c.m, vnni, got, c.want)
			}
		}
	}
	impl, vnni = implAVX2, true
	if got := linearPath(16, 4096, false); got != fewRows {
		t.Errorf("16 rows of 4096, AVX2 with AVX-VNNI: path %d, want the few-row path", got)
	}
}

// TestActivationKernels checks the input activation kernels against
// quant.GeluTanh and quant.Silu as activate's Go code applies them, bit
// for bit: every bfloat16 and float16 value (swiglu's up ones random, and
// 1, so that the gate's own rounding shows), and a million random float32
// values of every magnitude (65,536 under the race detector). Their exponential is not math.Exp, so a
// float64 result that lay within a last-bit difference of a float32
// rounding boundary could round the other way: none does among these.
func TestActivationKernels(t *testing.T) {
	forEachProductImpl(t, func(t *testing.T) {
		if !hasFMA {
			t.Skip("no FMA3: the activations run in Go")
		}
		rng := rand.New(rand.NewPCG(23, 24))
		for _, dt := range dtype.Floats() {
			size := dt.Size()
			n := 1 << 16
			if dt == dtype.Float32 && !raceOn {
				n = 1 << 20 // 2^16 random ones under the race detector
			}
			x := make([]byte, 2*n*size) // [gate | up]
			for i := range n {
				switch dt {
				case dtype.Float32:
					f := float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
					if rng.IntN(8) == 0 {
						f = math.Float32frombits(rng.Uint32())
					}
					binary.LittleEndian.PutUint32(x[4*i:], math.Float32bits(f))
				default:
					binary.LittleEndian.PutUint16(x[2*i:], uint16(i)) // every 16-bit value
				}
				up := float32(1)
				if i%2 == 1 {
					up = float32(rng.NormFloat64())
				}
				dtype.Store(x, dt, n+i, up)
			}
			for _, act := range []string{op.ActGeluTanh, op.ActSwiGLU} {
				src := x[:n*size]
				if act == op.ActSwiGLU {
					src = x
				}
				got := make([]byte, n*size)
				if done := activateBlocks(dt, act, src, got); done != n {
					t.Fatalf("%s %s: the kernel did %d of %d elements", dt, act, done, n)
				}
				v := make([]float32, 2*n)
				want := make([]byte, n*size)
				xs := v[:n]
				widenBlock(dt, src, 0, xs)
				for j, f := range xs {
					if act == op.ActGeluTanh {
						xs[j] = dt.Round(quant.GeluTanh(f))
					} else {
						up := dtype.Load(x, dt, n+j)
						xs[j] = dt.Round(dt.Round(quant.Silu(f)) * up)
					}
				}
				storeBlock(dt, want, 0, xs)
				diff := 0
				for j := 0; j < n; j++ {
					a, b := got[j*size:(j+1)*size], want[j*size:(j+1)*size]
					if !bytes.Equal(a, b) {
						f := dtype.Load(src, dt, j)
						if f != f || dtype.Load(want, dt, j) != dtype.Load(want, dt, j) {
							continue // NaN in, NaN out: an error for int8_linear, whatever its bits
						}
						if diff++; diff <= 5 {
							t.Errorf("%s %s of %v: %x, want %x", dt, act, f, a, b)
						}
					}
				}
				if diff > 0 {
					t.Errorf("%s %s: %d of %d results differ", dt, act, diff, n)
				}
			}
		}
	})
}

// TestCopyStream copies every length up to a few blocks, into outputs at
// every alignment, with each kernel set, and checks that it writes the
// bytes and nothing past them.
func TestCopyStream(t *testing.T) {
	forEachProductSet(t, true, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(25, 26))
		for n := range 300 {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			for off := range 65 {
				buf := make([]byte, 64+off+n+64)
				copyStream(buf[64+off:64+off+n], src)
				sfence()
				if !bytes.Equal(buf[64+off:64+off+n], src) {
					t.Fatalf("%d bytes at offset %d: copied wrong", n, off)
				}
				for i, b := range append(buf[:64+off:64+off], buf[64+off+n:]...) {
					if b != 0 {
						t.Fatalf("%d bytes at offset %d: byte %d outside the copy written", n, off, i)
					}
				}
			}
		}
	})
}

// TestPackColsQuadsRun compares the kernel that packs a pair of quad
// panels down a run of quads of mm_int8's b (on AVX2 it only runs on
// machines with AVX-VNNI, so it is checked here directly, wherever AVX2
// is) with the Go packing of the same quads, for columns and quads
// anywhere in b, and checks it writes nothing else.
func TestPackColsQuadsRun(t *testing.T) {
	forEachProductSet(t, false, func(t *testing.T) {
		if impl == implGeneric {
			t.Skip("no kernel")
		}
		rng := rand.New(rand.NewPCG(27, 28))
		nr := gemmCols()
		qb := 4 * nr
		for _, s := range []struct{ k, n int }{{4, 2 * nr}, {64, 2*nr + 3}, {36, 5 * nr}, {256, 8*nr + 1}} {
			b := make([]byte, s.k*s.n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			for n0 := 0; n0+2*nr <= s.n; n0 += nr / 2 {
				for qc := 0; qc < s.k/4; qc += 3 {
					quads := s.k/4 - qc
					const guard = 64
					pstride := quads*qb + 32
					got := make([]byte, pstride+quads*qb+guard)
					want := make([]byte, len(got))
					packColsQuadsRun(b[4*qc*s.n+n0:(4*(qc+quads)-1)*s.n+n0+2*nr], s.n, quads, got, pstride)
					for pn := range 2 {
						for q := range quads {
							at := pn*pstride + q*qb
							packColsQuadGo(b, s.k, s.n, n0+pn*nr, qc+q, want[at:at+qb])
						}
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("k %d, n %d: columns from %d, quads from %d: packed wrong", s.k, s.n, n0, qc)
					}
				}
			}
		}
	})
}

// TestGemvRowsQuad checks the quad kernels of mm_int8's cols path (VNNI's,
// and AVX-512's without it, both with b cold, in blocks of coldCols
// columns, and cached) against
// gemvRowsQuadGeneric: every column's sum, in the kernels' order, added to
// what c held, for one and two quads a pass, with b's rows longer than the
// columns taken.
func TestGemvRowsQuad(t *testing.T) {
	forEachProductSet(t, false, func(t *testing.T) {
		if !colsInQuads() {
			t.Skip("pairs on this set")
		}
		rng := rand.New(rand.NewPCG(29, 30))
		for _, s := range []struct{ kq, n, ldb int }{{1, 64, 64}, {2, 64, 70}, {3, 128, 128}, {5, 192, 200}, {8, 64, 4096}, {3, 4160, 4170}} {
			x, b := make([]byte, 4*s.kq), make([]byte, 4*s.kq*s.ldb)
			for i := range x {
				x[i] = byte(rng.Uint32())
			}
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			x[0], b[0] = 0x80, 0x7f
			got, want := make([]byte, 4*s.n), make([]byte, 4*s.n)
			for i := range got {
				got[i] = byte(rng.Uint32())
			}
			copy(want, got)
			gemvRowsQuadGeneric(quadCols(), x, b, s.ldb, s.kq, want)
			for _, cold := range []bool{false, true} {
				c := bytes.Clone(got)
				gemvRowsQuad(x, b[:(4*s.kq-1)*s.ldb+s.n], s.ldb, s.kq, c, cold)
				for p := 0; p < len(c); p += 4 {
					if g, w := binary.LittleEndian.Uint32(c[p:]), binary.LittleEndian.Uint32(want[p:]); g != w {
						t.Fatalf("%d quads, %d columns, cold %v: position %d: %d, want %d", s.kq, s.n, cold, p/4, int32(g), int32(w))
					}
				}
			}
		}
		// Every pair of byte values, each filling a quad of x and of a
		// column, two quads a pass: where products are largest, and where
		// VPMADDUBSW would saturate if the split were wrong.
		const n = 256
		b := make([]byte, 8*n)
		for r := range 8 {
			for j := range n {
				b[r*n+j] = byte(j)
			}
		}
		x := make([]byte, 8)
		for v := range 256 {
			for i := range x {
				x[i] = byte(v)
			}
			got := make([]byte, 4*n)
			gemvRowsQuad(x, b, n, 2, got, v%2 == 0)
			want := make([]byte, 4*n)
			gemvRowsQuadGeneric(quadCols(), x, b, n, 2, want)
			if !bytes.Equal(got, want) {
				t.Fatalf("x all %d: the sums differ from gemvRowsQuadGeneric's", int8(v))
			}
		}
	})
}

// TestUnquad compares unquad's kernels with unquadGeneric: random sums,
// none to three other accumulators, several blocks from an offset, and
// checks that nothing outside [lo, hi) changes.
func TestUnquad(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(31, 32))
		w := 4 * quadCols() // bytes a register of columns
		for _, others := range []int{0, 1, 2, 3} {
			for _, blocks := range []int{1, 2, 5} {
				lo := w * 2
				hi := lo + blocks*w
				n := hi + w
				random := func() []byte {
					b := make([]byte, n)
					for i := range b {
						b[i] = byte(rng.Uint32())
					}
					return b
				}
				total, want := random(), []byte(nil)
				want = append(want, total...)
				var accs, wantAccs [][]byte
				for range others {
					a := random()
					accs, wantAccs = append(accs, a), append(wantAccs, append([]byte(nil), a...))
				}
				corr := int32(rng.Uint32())
				unquadGeneric(want, wantAccs, lo, hi, corr)
				unquad(total, accs, lo, hi, corr)
				if !bytes.Equal(total, want) {
					t.Fatalf("%d others, %d blocks: sums differ from unquadGeneric's", others, blocks)
				}
			}
		}
	})
}

// TestGemv1Ahead runs both forms of the AVX2 set's one-row kernel, the
// one that prefetches every line ahead (gemv1Ahead) and the one that does
// not, against gemvGeneric: int8 extremes in x and the weight, weight rows
// that are not a multiple of the kernel's step apart, and k long enough to
// cross pages.
func TestGemv1Ahead(t *testing.T) {
	if !xcpu.X86.HasAVX2 || impl == implGeneric {
		t.Skip("no AVX2 kernels here")
	}
	t.Logf("this processor takes the prefetching form: %v", gemv1Ahead)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{16, 48, 4096, 8192 + 16} {
		ldw := k + 7
		w := make([]byte, 8*ldw)
		for i := range w {
			w[i] = byte(rng.IntN(256))
		}
		w[0], w[ldw] = 0x80, 0x7f
		x := make([]byte, 2*k)
		for i := range k {
			binary.LittleEndian.PutUint16(x[2*i:], uint16(int16(int8(rng.IntN(256)))))
		}
		binary.LittleEndian.PutUint16(x, uint16(0xff80)) // -128
		want := make([]byte, 32)
		gemvGeneric(1, x, 2*k, w, ldw, k, want, 32)
		for _, ahead := range []bool{false, true} {
			got := make([]byte, 32)
			gemv1For(ahead)(x, 2*k, w, ldw, k, got, 32)
			if !bytes.Equal(got, want) {
				t.Errorf("k %d, ahead %v: %v, want %v", k, ahead, got, want)
			}
		}
	}
}

// TestDotTiles compares each AVX2 dot tile (1 to 4 rows) with
// dotTileGeneric on random int8 values (-128 among them) over sums that
// already hold values: the tiles add their rows' three sums, add 0 to
// the int32 after them, and change nothing else in the buffer (the
// poisoned bytes around every row stay as they were; TestDotTilesGuarded
// checks that a form stores no row it does not multiply).
func TestDotTiles(t *testing.T) {
	if !xcpu.X86.HasAVX2 || impl == implGeneric {
		t.Skip("no AVX2 kernels here")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for rows := 1; rows <= dotTileRows; rows++ {
		for _, steps := range []int{1, 2, 7, 64} {
			k := steps * dotStep
			ldw := k + 5
			w := make([]byte, dotTileChannels*ldw)
			for i := range w {
				w[i] = byte(rng.IntN(256))
			}
			w[0], w[ldw+1] = 0x80, 0x80
			x := make([]byte, dotTileRows*2*k)
			for r := range dotTileRows {
				for i := range k {
					binary.LittleEndian.PutUint16(x[dotAt(r, i):], uint16(int16(int8(rng.IntN(256)))))
				}
			}
			binary.LittleEndian.PutUint16(x[dotAt(0, 0):], 0xff80) // -128 by -128
			// 12 poisoned bytes between rows, and rows not 16-byte aligned.
			const lds = 4 * 7
			sums := make([]byte, lds*dotTileRows+16)
			for i := range sums {
				sums[i] = byte(rng.IntN(256))
			}
			want := bytes.Clone(sums)
			dotTileGeneric(rows, x, w, ldw, steps, want, lds)
			dotTilesAVX2[rows-1](x, w, ldw, steps, sums, lds, x, 0)
			if i := diff(sums, want); i >= 0 {
				t.Errorf("%d rows, %d steps: byte %d (row %d, byte %d of it) is %#x, want %#x", rows, steps, i, i/lds, i%lds, sums[i], want[i])
			}
		}
	}
}

// TestGemmTileMix compares each AVX2 tile over a panel and a half (1 to
// mixRows rows) with gemmTileMixGeneric on random int8 values (-128 by
// -128 among them), over odd and even pairs of k (the kernel does two an
// iteration), storing and adding: into c and c16 laid out as manyBody
// lays them out (c16 32 columns into c's rows), the bytes between and
// after them poisoned and left as they were.
func TestGemmTileMix(t *testing.T) {
	if !xcpu.X86.HasAVX2 || impl == implGeneric {
		t.Skip("no AVX2 kernels here")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	int16s := func(b []byte) {
		for i := 0; i < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], uint16(int16(int8(rng.IntN(256)))))
		}
	}
	for mr := 1; mr <= mixRows; mr++ {
		for _, kp := range []int{1, 2, 3, 8, 9, 64} {
			lda := 4*kp + 8
			a := make([]byte, mr*lda)
			int16s(a)
			binary.LittleEndian.PutUint16(a, 0xff80)
			b, b16 := make([]byte, 32*kp), make([]byte, 64*kp)
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			int16s(b16)
			b[0], b16[0], b16[1] = 0x80, 0x80, 0xff
			const ldc = 4*48 + 12
			for _, add := range []bool{false, true} {
				c := make([]byte, mr*ldc)
				for i := range c {
					c[i] = byte(rng.IntN(256))
				}
				want := bytes.Clone(c)
				gemmTileMixGeneric(mr, a, lda, b, b16, kp, want, want[4*32:], ldc, add)
				gemmTilesMix[mr-1](a, lda, b, b16, kp, c, c[4*32:], ldc, add)
				if i := diff(c, want); i >= 0 {
					t.Errorf("%d rows, %d pairs, add %v: byte %d (row %d, byte %d of it) is %#x, want %#x", mr, kp, add, i, i/ldc, i%ldc, c[i], want[i])
				}
			}
		}
	}
}

// TestColsMax checks the rows up to which mm_int8 reads b as it is, per
// kernel set, and on a Zen 3 (4 with the AVX2 set only).
func TestColsMax(t *testing.T) {
	defer func(i int, v, z bool) { impl, vnni, zen3 = i, v, z }(impl, vnni, zen3)
	for _, c := range []struct {
		set        int
		vnni, zen3 bool
		want       int
	}{
		{implAVX2, false, false, 8}, {implAVX2, false, true, 4}, {implAVX2, true, true, 15},
		{implAVX512, false, true, 11}, {implAVX512, true, false, 7}, {implGeneric, false, true, 8},
	} {
		impl, vnni, zen3 = c.set, c.vnni, c.zen3
		if got := colsMax(); got != c.want {
			t.Errorf("kernel set %s, VNNI %v, Zen 3 %v: colsMax %d, want %d", kernelSetNames[c.set], c.vnni, c.zen3, got, c.want)
		}
	}
}
