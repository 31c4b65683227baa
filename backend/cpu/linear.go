package cpu

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/quant"
)

// The int8 linear operations. Both are an exact int8 product A·Wᵀ (A
// [M, K], W [N, K], one row per output channel) by the kernels of
// _asm/linear.go, the rows of A widened to int16 first (kept int8 with
// quad panels, below). The ways to lay the work out, which pathFor,
// linearPath and mmInt8 choose by M:
//
//	int8_linear, AVX2 set without AVX-VNNI, K % 16 == 0:
//	    up to 8 rows one row at a time, 9-48 dot, 49-192 few, more many
//	    (on a Zen 3: 1 row one row at a time, 2-48 dot: dotMinFor);
//	    a prepared weight: dot to 28 rows, few to 96 (dotMaxPrepared)
//	int8_linear otherwise:
//	    up to 8 rows one row at a time, up to 96 few, more many
//	    (a plain weight with the AVX2 set without AVX-VNNI: few to 192, fewMaxPlain)
//	(a prepared weight's plain rows are what the one-row and dot paths read)
//	mm_int8 (b is [K, N]), AVX2 or AVX-512 set:
//	    up to colsMax() rows cols (8; 7 with AVX512-VNNI, 15 with AVX-VNNI, 11 with AVX-512 alone, 4 with AVX2 on a Zen 3),
//	    up to 96 few (b packed a few panels at a time), more many (b packed whole)
//	mm_int8 otherwise:
//	    up to 8 rows cols, more many (b packed whole, int16 panels)
//
//   - many rows (M > fewMax or fewMaxPlain, linear_many.go): W packed once per call into panels of
//     gemmCols channels (per pair of k, each channel's two values, as
//     int8 on the assembly sets, else int16; quads with VNNI, below);
//     then blocks of blockRows rows by blockCols channels in parallel,
//     each in passes of k (blockPairs pairs over int16 panels, i8Pass
//     over int8 ones, quadPass quads), gemmTile computing tiles of up to
//     gemmRows rows by one panel, or with AVX-512 two (tileWide), or with
//     AVX2's int8 panels mixRows rows by a panel and a half (tilesMix),
//     while the panels' part stays in the caches as the block's rows go by;
//   - few rows (M > gemvMax, linear_few.go): the panels in parallel, each packed just
//     before its tiles use it (fewBody), so the int8 weight is read from
//     memory once and the packed form never leaves the caches (a prepared
//     weight comes packed whole instead; mm_int8's b is packed a pass of
//     a few panels at a time, fewColsBody); with AVX2's int8 panels, three
//     panels a unit, for tilesMix (fewMixBody);
//   - one row at a time (M <= gemvMax, linear_one.go): gemv reads 8
//     weight rows as they are, one after another, and multiplies them
//     with up to 4 rows of A, at the memory's speed;
//   - dot products (int8_linear, dotMin to dotMax rows, dotMaxPrepared
//     for a prepared weight, K a multiple of 16, the AVX2 kernel set
//     without quad panels: linearPath takes it
//     there instead of the two above): dotTile
//     reads the weight rows as they are too, 4 rows of A (interleaved a
//     step of 16 values at a time) by 3 channels at a time, each product
//     a vector of partial sums along k (dotBody, linear_one.go);
//   - mm_int8's few rows (M <= colsMax(), linear_cols.go): b [K, N] read
//     as it is, row by row, k split between the threads (colsBody).
//
// Packing into panels is in linear_pack.go, a prepared weight's panels in
// linear_packed.go, the kernels' Go forms in linear_generic.go and their
// dispatch in linear_amd64.go.
//
// Quad panels (quadPanels: AVX-512 with AVX512-VNNI, AVX2 with AVX-VNNI)
// serve the few- and many-row paths there, and the same quad arithmetic
// the one-row path (gemv, on the weight's rows) and mm_int8's few
// rows (gemvRowsQuad, on b's; also with AVX-512 alone, by VPMADDUBSW:
// colsInQuads). VPDPBUSD multiplies four unsigned bytes by four signed ones
// and adds the four products to an int32 lane: twice VPDPWSSD's work per
// instruction, exact (a product is at most 255·128 in magnitude, four of
// them far from 2^31), but unsigned on one side. So the panels hold each
// channel's four values of a quad of k plus 128 (the byte XOR 0x80), the
// rows of A stay int8 (zero past K), and since Σ a·(w+128) = Σ a·w +
// 128·Σ a, each row's -128·Σ a (product.corr, wrapping as int32 does) is
// added to its sums once, by the tile that starts them. A quad of k takes
// 4 bytes of a row, as a pair of int16 does, and a quad of a panel 4 bytes
// a channel, as an int16 pair: the drivers' arithmetic is the same, with
// kp counting quads. With AVX-512 the many-row path runs the tiles over
// two panels (wideMinRows), in passes of quadPass quads, each tile
// prefetching a share of the next two panels' part into the second-level
// cache; AVX2's 16 registers hold the sums of one panel's tiles only.
//
// The few-row path packs its panels as int8 pairs (half the bytes of the
// int16 ones, widened as the tiles load them) or quads. A prepared weight
// (op.PackedWeight, packed by preparedPanels the first time) is already in
// such panels: with it the few-row path packs nothing, and the many-row
// path skips the call's packing (the one-row path, and the dot path where
// linearPath takes it, read the plain weight instead). mm_int8 at up to
// colsMax() rows reads b [K, N] as it is, row by row (colsBody), instead
// of packing it. With up to fewMax rows the few-row path packs b's
// columns a few pairs of panels and a pass of k at a time into a buffer
// in the cache, just before its tiles read them (fewColsBody). With more,
// on the assembly sets, it packs b whole into int8 panels (quads with
// VNNI), four rows of b at a time so that each panel's part is written in
// whole lines (on AVX2 where the pairs of k are even in number;
// packColsI8Body: non-temporal when b and the panels outgrow the
// last-level cache), and the many-row path runs on them as on a prepared
// weight. Same-process A/B against packing int16 panels for the many-row
// path: on a 2-core Zen 3, 0.75-0.83 of the time at 16 to 96 rows,
// 0.91-0.95 at 512, 1.02 (noise) at 4096x3072x3072; on a 2-core Zen 4
// (AVX-512), 0.66-0.86 at 9 to 96 rows, 0.93 at 512, 0.95 at
// 4096x3072x3072.
//
// Every way, a block's int32 sums, held in a small buffer, are finished as
// soon as they are complete: written as int32 (mm_int8) or through the
// epilogue (int8_linear) straight into the output. Each sum is exact (it
// wraps modulo 2^32 as int32 does, which only the documented extreme at
// K = 131,072 reaches), so neither the path nor the split changes a result.

const (
	gemmRows = 6  // the most rows of a gemmTile tile
	mixRows  = 4  // the most rows of a gemmTileMix tile
	mixCols  = 16 // the columns of the int8 panels it takes (AVX2's; p.mixes)
	// blockRows is the rows per block of the many-row path (a multiple
	// of gemmRows): each block reads its channels' panels once, so where
	// the weight outgrows the last-level cache taller blocks read it from
	// memory fewer times. Medians, alternated in one process on a 2-core
	// Zen 5, a prepared weight: 4096x3072x12288 220-225 ms at 192 rows
	// against 228-231 at 96, 2048x4096x11008 135-136 and 138-142, 200 rows
	// 2.98-3.04 and 3.14-3.22; 4096x3072x3072, 512 to 1024 rows and 128
	// within the noise (288 rows: as 192). The same machine's AVX2 and
	// AVX-512 kernels without VNNI, `kitchen bench` alternated twice:
	// 4096x3072x3072 286-293 ms against 298-301 and 146-148 against
	// 146-164, 512x4096x4096 64-67 and 64-65, 31.4-31.8 and 33-35.
	blockRows  = 192
	blockCols  = 256  // channels per block (a multiple of every gemmCols)
	blockPairs = 256  // pairs of k per pass of the many-row path over int16 panels (i8Pass, quadPass for the others)
	fewPairs   = 2048 // pairs of k per pass of the few-row path
	// quadPass is the quads of k per pass of the many-row path with quad
	// panels (128 KiB of each panel): the tiles keep their sums in
	// registers over a whole pass, and at this speed ending a pass costs
	// more than reading the panels from the second-level cache. Measured
	// on a 2-core Zen 5 (medians, alternated in one process), 4096x3072x3072
	// and 512x4096x4096: 85.6 and 20.5 ms at 64 quads, 73.9 and 18.2 at
	// 128, 68.1 and 16.9 at 256, 64.7 and 15.8 at 512; then 59.9 and 14.7
	// at 512 against 57.7 and 14.4 at 1024 (2048: no different).
	quadPass = 1024
	// grainMACs is the least work worth handing to another thread.
	grainMACs = 1 << 21
)

// wideMinRows is the fewest rows of a product for which the many-row path
// runs tiles over two panels (quad, or int8 pair ones where the set has
// no VNNI; see tileWide): on AMD's processors every product of
// the path, elsewhere those of 2048 rows or more (wideMinRowsFor). Measured
// (BENCHMARKS.md) with the VPDPWSSD tiles that the quad tiles replaced,
// which had the same two forms: on two cores of an Emerald Rapids host,
// 10-20% faster at 4096 rows, 7-24% slower at 512; on a 2-core Zen 4,
// alternating in one process: 0.95-0.99 of the one-panel tiles' time at
// 4096 rows, 0.93-0.96 at 512 and 1024, 0.97-0.99 at 128 and 256. (The
// quad tiles have been measured on a Zen 5 only, over two panels.)
var wideMinRows = wideMinRowsFor()

// fewMax is the largest M that takes the few-row path: up to 96 rows (a
// block of rows, when blocks were that tall), packing as it goes costs
// less than packing the whole weight first (mm_int8's b, [K, N], packs
// faster whole: see mmInt8). gemvMax is the largest M that takes the
// one-row path, up to 4 rows at a time: few enough that rereading the
// weight from the cache for each group costs less than packing it
// (measured on a 2-core Zen 3, row by row: the one-row path won up to M =
// 10, the few-row path from 12; see dotMin for the dot path).
var fewMax, gemvMax = 96, 8

// productParts is parallelForParts's perThread for the products: their
// last parts as small as 1/16 of a thread's share, less than
// parallelFor's usual, since a product's parts are long and even, and a
// thread slowed by anything else running then hands less of the call to
// the end (with parts all that size, 5-10% faster than 4 per thread on a
// shared 2-core machine). The one-row path's calls, under a millisecond,
// took 4 parts a thread of equal size (16 were slower on a 2-core Zen
// 3); with parts that shrink as the call runs out (loop.work) they take
// 16 as the rest do (see loop.work for what the two changes gained).
const productParts = 16

// pathFor chooses the layout for m rows.
func pathFor(m int) int {
	switch {
	case m <= gemvMax:
		return oneRow
	case m <= fewMax:
		return fewRows
	}
	return manyRows
}

// linearPath chooses int8_linear's layout for m rows of k: pathFor's,
// except that with the AVX2 kernels without quad panels the weight takes
// the dot path for dotMin to dotMax rows when k is a multiple of 16, and a
// plain one the few-row path to fewMaxPlain rows. With
// quad panels the few-row path is faster (on a 2-core Zen 5, 4096x4096,
// the weight out of the caches, it took 0.88-0.96 of the dot path's time
// from 9 to 16 rows, 0.77-0.85 from 20 to 32), and so it is with AVX-512's
// wider tiles without them (the same machine, medians of blocks of 15
// calls alternated in one process, a plain weight: 0.68-0.75 at 9 and 16
// rows, 0.56-0.62 at 32 and 48; a prepared one, 0.55-0.61 at 16 and 32).
// With the AVX2 set a plain weight's few-row path took 0.93-1.12 of the
// dot path's time from 9 to 48 rows. A prepared weight (prepared) has its
// plain rows read by the dot path only to dotMaxPrepared rows, its panels
// by the few-row path above; and by the one-row path up to gemvMax rows:
// on a 2-core Zen 5, 4096x4096, two threads, it took 0.83-0.88 of the
// few-row path's time over the prepared panels at 2, 4 and 8 rows.
func linearPath(m, k int, prepared bool) int {
	if impl != implAVX2 || quadPanels() {
		return pathFor(m)
	}
	top := dotMax
	if prepared {
		top = dotMaxPrepared
	}
	switch {
	case k%16 == 0 && m >= dotMin && m <= top:
		return dotRows
	case !prepared && m > gemvMax && m <= fewMaxPlain:
		return fewRows
	}
	return pathFor(m)
}

// dotMin and dotMax bound the rows that take the dot path. Measured on a
// 2-core Zen 3 (AVX2), 4096x4096, alternating with the other paths in one
// process: the dot path took 0.72-0.97 of their time from 3 to 48 rows
// (0.72-0.75 at 12 and 16, against the few-row path), and as long at 64.
// On a 2-core Zen 4 (AVX-512), the same way, before the few-row path's
// later changes: 0.41-0.91 of the few-row path's time from 3 to 48 rows
// with VNNI (0.66-0.67 at 16), 0.38-0.94 without; at 64, 0.94-0.96 (that
// machine runs 512-bit multiply-adds at half the rate of 256-bit ones,
// which the AVX-512 processors without VNNI, Intel's, do not). Since the
// one-row path multiplies up to 4 rows at once (gemv), it is faster to 8
// rows on a 2-core Zen 5 (two threads: 0.58-0.74 of the dot path's time at
// 4 rows, 0.80-0.85 at 8) and about as fast at 12, so dotMin is gemvMax+1
// there; on a Zen 3, once the dot tile read its rows of x interleaved, the
// dot path was faster from 2 rows (dotMinFor).
var dotMin = dotMinFor()

// dotMinFor is dotMin for this processor: 2 rows on a Zen 3, where the dot
// path was faster than the one-row path from 2 rows (two threads,
// int8_linear 4096x4096, the weight evicted, alternated in one process,
// p50 ms, two runs: 3 rows 0.98 and 0.70 against 1.30 and 0.86, 4 rows 0.92
// and 1.13 against 1.34 and 1.86, 6 rows 1.69 and 1.36 against 2.05 and
// 1.54, 8 rows 1.71 and 1.30 against 2.59 and 1.92; 2 rows, once the tile
// had a form for 2 rows, 0.87 and 0.76 against 0.90 and 0.85; one row 0.80
// and 0.59 against 0.77 and 0.54); elsewhere gemvMax+1 (see dotMin).
func dotMinFor() int {
	if zen3 {
		return 2
	}
	return gemvMax + 1
}

const dotMax = 48

// dotMaxPrepared is dotMax for a prepared weight, whose panels the
// few-row path reads without packing: on a 2-core Zen 3, 4096x4096, the
// weight out of the caches, calls run in turn in one process, the median
// of their ratios to the dot path's, the few-row path over the panels
// took 1.03-1.04 of its time at 16 and 20 rows, 0.98-1.00 at 24 and 28,
// 0.92-0.96 at 32, 0.91 at 40 and 0.88-0.93 at 48.
const dotMaxPrepared = 28

// fewMaxPlain is fewMax for a plain weight with the AVX2 set without quad
// panels, whose few-row path runs tilesMix over whole passes: packing as
// it goes there costs less than the many-row path's packing the weight
// first up to 192 rows, a block of them. On a 2-core Zen 3, 4096x4096,
// the weight out of the caches, calls run in turn in one process, the
// median of the many-row path's ratios to the few-row path's: 1.03-1.06
// from 112 to 192 rows, 1.01-1.02 from 256 to 512 (over a prepared
// weight's panels, which neither packs, 0.98-1.03).
const fewMaxPlain = 192

// The ways to lay out a product.
const (
	manyRows = iota
	fewRows  // up to fewMax rows
	oneRow   // up to gemvMax rows
	colsRows // mm_int8 up to colsMax() rows: b [K, N] read as it is
	dotRows  // int8_linear, dotMin to dotMax rows (dotMaxPrepared prepared), AVX2: W read as it is (dotBody)
)

// colsMax is the most rows of A for which mm_int8 multiplies b as it is
// rather than packing it first: gemvRows's cost grows with each row (it
// reads the cached chunk of b again for every row), the packing's does
// not; measured on a 2-core Zen 3, 4096x4096 b: 1 row about 1 ms instead
// of 5.5-8, 8 rows about as long as packing. With VNNI the packed tiles are
// faster still, and so is reading b as it is with quads (gemvRowsQuad): on
// a 2-core Zen 5, b 4096x4096 out of the caches, medians of blocks of 36
// calls alternated in one process, the few-row path on quad panels took
// 1.25-1.28 times as long as the cols path at 6 rows, 1.04-1.05 at 7 and
// 0.94-0.99 at 8 with AVX-512; with AVX-VNNI 1.05-1.07 at 14 rows,
// 1.02 at 15 and 0.96-0.98 at 16. Without VNNI, once the few-row path
// packed b's pairs a few panels at a time too (the same machine, medians
// of blocks of 15 calls alternated in one process), it took 1.03-1.08
// times the cols path's time at 8 rows and 0.88-0.96 at 10 with AVX2;
// with AVX-512 alone, since its cols path takes quads too (colsInQuads),
// 1.53 at 5 rows, 1.36 at 6, 1.29 at 7, 1.25 at 8, 1.08 at 10, 1.04 at 11
// and 0.96 at 12 (medians of 275 calls alternated in one process). On a
// Zen 3 (zen3), once the AVX2 packing kernel prefetched the rows it packs
// next, the few-row path took 0.71-0.94 of the cols path's time from 5 to
// 8 rows (b evicted before each call, blocks of 6 calls alternated in one
// process, p50, one to three runs a row count), about as long at 4
// (0.98-1.08) and 1.24-2.15 times as long at 1 to 3: there the cols path
// stops at 4 rows.
func colsMax() int {
	switch {
	case quadPanels() && impl == implAVX512:
		return 7
	case quadPanels():
		return 15
	case impl == implAVX512:
		return 11
	case impl == implAVX2 && zen3:
		return 4
	}
	return 8
}

// product is one int8 product, its operands laid out for the kernels.
type product struct {
	m, k, n int
	path    int
	kp      int    // pairs of k: K rounded up to even (at least one pair); with quads, quads of k
	x       []byte // the rows of A as int16 (with quads, int8, zero past K), lda bytes apart; on the dot path in groups of 4 interleaved a step at a time (dotAt), 4·lda bytes a group
	quads   bool   // few, many or one row where quadPanels, cols where colsInQuads: x holds int8 rows, corr is set; few and many rows: quad panels
	corr    []byte // with quads, per row of A, -128 times its sum (int32, wrapping), which the tiles add
	lda     int
	wp      []byte // many rows (or i8): the packed panels, [N/gemmCols][kp][gemmCols] pairs
	i8      bool   // panels hold int8 pairs, not int16 (on the assembly sets, and the few-row path's and a prepared weight's everywhere)
	wide    bool   // the many-row path runs tiles over two panels (tileWide)
	shared  bool   // wp is a prepared weight's: not ours to reuse
	w       []byte // few rows, one row, dot: the weight, [N, K]; colsRows and cols: b, [K, N]
	cols    bool   // few rows: w is mm_int8's b, packed a few pairs of panels at a time (fewColsBody)
	fin     finisher
}

// A finisher writes finished sums to the output: rows [r0, r0+rows) and
// channels [c0, c0+cols), held as int32 rows lds bytes apart in sums.
type finisher interface {
	finish(r0, c0, rows, cols int, sums []byte, lds int)
}

func roundUp(v, to int) int { return (v + to - 1) / to * to }

// newProduct lays out A for an [m, k] by [n, k] product on the path
// given.
func newProduct(m, k, n, path int) *product {
	p := &product{m: m, k: k, n: n, path: path, kp: max(1, (k+1)/2), i8: path == fewRows}
	if (path == manyRows || path == fewRows || path == oneRow) && quadPanels() || path == colsRows && colsInQuads() {
		// Quads of k: 4 bytes of a row of A a quad, as a pair of int16.
		// The one-row and cols paths' kernels read int8 rows too (see
		// gemvBody, colsBody).
		p.quads, p.i8, p.kp = true, false, max(1, (k+3)/4)
		p.corr = smallBufs.get(4 * m)
	}
	p.wide = path == manyRows && m >= wideMinRows && hasWideTiles()
	// Reused, not cleared: the one int16 past an odd K only meets the
	// weight's zero. The dot path's rows go in groups of dotTileRows,
	// interleaved a step at a time (dotAt; lda is then a row's share of
	// its group); a last group's tile multiplies only its rows, so the
	// rest of the group is never read.
	if path == dotRows {
		p.lda = 2 * roundUp(max(1, k), dotStep)
		p.x = getBuf(roundUp(m, dotTileRows) * p.lda)
		return p
	}
	// An odd number of 64-byte lines apart, so that the rows a tile reads
	// do not fall into the same cache sets.
	p.lda = roundUp(4*p.kp, 128) + 64
	p.x = getBuf(m * p.lda)
	clear(p.x[m*p.lda:])
	return p
}

// release returns the product's large buffers for reuse.
func (p *product) release() {
	putBuf(p.x)
	if p.corr != nil {
		smallBufs.put(p.corr)
	}
	if !p.shared {
		putBuf(p.wp)
	}
	*p = product{}
}

// setRow sets row r of A from int8 values.
func (p *product) setRow(r int, q []byte) {
	if p.path == dotRows {
		p.setDotRow(r, q)
		return
	}
	if !p.quads {
		widenInt8(q[:p.k], p.x[r*p.lda:r*p.lda+2*p.k])
		return
	}
	row := p.x[r*p.lda : r*p.lda+4*p.kp]
	copy(row, q[:p.k])
	clear(row[p.k:])
	binary.LittleEndian.PutUint32(p.corr[4*r:], uint32(-128*sumInt8(q[:p.k])))
}

// sumInt8 is the sum of the int8 values of q, eight at a time: each byte
// plus 128 is unsigned, and masks add a word's bytes into four 16-bit
// lanes, which hold 128 words' worth (at most 510 a word) before they are
// added up.
func sumInt8(q []byte) int32 {
	const lo8, lo16 = 0x00ff00ff00ff00ff, 0x0000ffff0000ffff
	var total int64
	whole := len(q) &^ 7
	for i := 0; i < whole; {
		var lanes uint64
		for end := min(whole, i+8*128); i < end; i += 8 {
			v := binary.LittleEndian.Uint64(q[i:]) ^ 0x8080808080808080
			lanes += v&lo8 + v>>8&lo8
		}
		lanes = lanes&lo16 + lanes>>16&lo16
		total += int64(lanes&0xffffffff + lanes>>32)
	}
	total -= 128 * int64(whole)
	for _, b := range q[whole:] {
		total += int64(int8(b))
	}
	return int32(total)
}

// setWeight lays out W from its int8 bytes: [N, K] rows, or (cols, many
// or few rows) the [K, N] matrix whose columns are the rows.
func (p *product) setWeight(ctx context.Context, w []byte, cols bool) error {
	if cols && p.path == fewRows && packColsLate {
		p.w, p.cols = w, true
		return nil
	}
	if p.shared || p.path != manyRows && !(cols && p.path == fewRows) {
		p.w = w
		return nil
	}
	p.i8 = !p.quads && (int8Panels() || p.path == fewRows)
	nr := gemmCols()
	panels := roundUp(p.n, nr) / nr
	// Reused, not cleared: the panels' channels past N make sums no one
	// reads; every other byte is written.
	p.wp = getBuf(panels * p.kp * p.pairBytes())
	switch {
	case cols && p.quads:
		return parallelFor(ctx, &packColsQuadsBody{p, w}, p.kp, max(1, grainBytes/(4*p.n)))
	case cols && p.i8:
		return parallelFor(ctx, &packColsI8Body{p, w, streaming(len(p.wp) + len(w))}, (p.kp+1)/2, max(1, grainBytes/(4*p.n)))
	case cols:
		return parallelFor(ctx, &packColsBody{p, w}, p.kp, max(1, grainBytes/(2*p.n)))
	}
	return parallelFor(ctx, &packBody{src: w, dst: p.wp, k: p.k, n: p.n, kp: p.kp, i8: p.i8, quads: p.quads}, panels, max(1, grainBytes/max(1, nr*p.k)))
}

// run computes the product and hands its sums to p.fin.
func (p *product) run(ctx context.Context) error {
	nr := gemmCols()
	switch p.path {
	case colsRows:
		return p.runCols(ctx)
	case oneRow:
		blocks := (p.n + gemvChannels - 1) / gemvChannels
		return parallelForParts(ctx, &gemvBody{p}, blocks, max(1, grainMACs/(gemvChannels*p.m*max(1, p.k))), productParts)
	case fewRows:
		panels := roundUp(p.n, nr) / nr
		if p.cols {
			group := colsGroupFor((panels+1)/2, helpers()+1)
			units := (panels + 2*group - 1) / (2 * group)
			return parallelForParts(ctx, &fewColsBody{p, group}, units, max(1, grainMACs/(2*group*nr*p.m*p.k)), productParts)
		}
		if p.mixes() {
			units := (panels + 2) / 3
			return parallelForParts(ctx, &fewMixBody{p}, units, max(1, grainMACs/(3*nr*p.m*p.kp*2)), productParts)
		}
		return parallelForParts(ctx, &fewBody{p}, panels, max(1, grainMACs/(nr*p.m*p.kp*2)), productParts)
	case dotRows:
		units := (p.n + dotChannels - 1) / dotChannels
		return parallelForParts(ctx, &dotBody{p}, units, max(1, grainMACs/(dotChannels*p.m*max(1, p.k))), productParts)
	}
	bm, bn := (p.m+blockRows-1)/blockRows, (p.n+blockCols-1)/blockCols
	return parallelForParts(ctx, &manyBody{p, bn}, bm*bn, max(1, grainMACs/(blockRows*blockCols*p.kp*2)), productParts)
}

// tiles runs gemmTile over rows [0, rows) of A from row r0, pairs [pc,
// pc+kc) of k, against one panel, or with pstride > 0 against two
// adjacent panels pstride bytes apart (tileWide), into c (ldc bytes a
// row). The tiles are as even as possible: 16 rows as 5, 5 and 6
// measured about 20% faster than as 6, 6 and 4. The quad tiles prefetch
// next, if not nil, a share each (with two panels, as much pstride
// bytes further too): what the tiles after these read.
func (p *product) tiles(r0, rows, pc, kc int, panel []byte, pstride int, c []byte, ldc int, next []byte) {
	tiles := (rows + gemmRows - 1) / gemmRows
	cols := gemmCols()
	if pstride > 0 {
		cols *= 2
	}
	pf, pfStep, share := panel, 0, 0
	if next != nil {
		share = (len(next) + tiles - 1) / tiles
		pfStep = (share + kc - 1) / kc
	}
	for t, i := 0, 0; i < rows; t, i = t+1, i+(rows-i)/(tiles-t) {
		// As even as possible: 16 rows are 5, 5 and 6.
		mr := (rows - i) / (tiles - t)
		at := (r0+i)*p.lda + 4*pc
		a, cs := p.x[at:at+(mr-1)*p.lda+4*kc], c[i*ldc:(i+mr-1)*ldc+4*cols]
		if next != nil {
			pf = next[min(t*share, len(next)-1):]
		}
		if pstride > 0 {
			p.tileWide(r0+i, mr, a, panel, pstride, kc, cs, ldc, pc > 0, pf, pfStep)
		} else {
			p.tile(r0+i, mr, a, panel, kc, cs, ldc, pc > 0, pf, pfStep)
		}
	}
}

// tile runs the tile kernel for the product's panels (int8 or int16
// pairs, or quads) over rows a, from row r of A; the quad tile prefetches
// pf[i·pfStep] at step i.
func (p *product) tile(r, mr int, a, panel []byte, kc int, c []byte, ldc int, add bool, pf []byte, pfStep int) {
	if p.quads {
		gemmTileQuad(mr, a, p.lda, panel, 0, kc, c, ldc, add, p.corr[4*r:], pf, pfStep)
		return
	}
	if p.i8 {
		gemmTileI8(mr, a, p.lda, panel, kc, c, ldc, add)
	} else {
		gemmTile(mr, a, p.lda, panel, kc, c, ldc, add)
	}
}

// tileWide computes a tile over two adjacent panels, the second pstride
// bytes after the first: with the quad tile, which prefetches pf[i·pfStep]
// at step i and as far into the second panel, or the int8 pair tile
// (AVX-512), or as two one-panel tiles (which tests force on every kernel
// set, to reach this path).
func (p *product) tileWide(r, mr int, a, panels []byte, pstride, kc int, c []byte, ldc int, add bool, pf []byte, pfStep int) {
	switch {
	case p.quads && hasWideTiles():
		gemmTileQuad(mr, a, p.lda, panels, pstride, kc, c, ldc, add, p.corr[4*r:], pf, pfStep)
		return
	case p.i8 && hasWideTiles():
		gemmTileWideI8(mr, a, p.lda, panels, pstride, kc, c, ldc, add)
		return
	}
	pb := p.pairBytes()
	p.tile(r, mr, a, panels[:kc*pb], kc, c, ldc, add, nil, 0)
	p.tile(r, mr, a, panels[pstride:pstride+kc*pb], kc, c[4*gemmCols():], ldc, add, nil, 0)
}

// pairBytes is the bytes of a panel per pair of k (or quad).
func (p *product) pairBytes() int {
	if p.i8 {
		return 2 * gemmCols()
	}
	return 4 * gemmCols()
}

// widenBody sets rows [lo, hi) of A from int8 rows of k.
type widenBody struct {
	p   *product
	src []byte
}

func (b *widenBody) run(lo, hi int) {
	for r := lo; r < hi; r++ {
		b.p.setRow(r, b.src[r*b.p.k:(r+1)*b.p.k])
	}
}

// mmFinish writes sums as mm_int8's int32 output.
type mmFinish struct {
	dst    []byte
	n      int
	stream bool // the output outgrows the last-level cache: non-temporal stores
}

func (f *mmFinish) finish(r0, c0, rows, cols int, sums []byte, lds int) {
	for i := range rows {
		at := 4 * ((r0+i)*f.n + c0)
		if f.stream {
			copyStream(f.dst[at:at+4*cols], sums[i*lds:i*lds+4*cols])
			continue
		}
		copy(f.dst[at:at+4*cols], sums[i*lds:])
	}
}

// linearFinish writes sums through int8_linear's epilogue.
type linearFinish struct {
	out      dtype.DType
	dst      []byte
	n        int
	xs       []byte    // float32 row scales
	ws, bias []float32 // per channel; bias rounded to out, or nil
	// wraps: K is op.MaxK, where one sum can wrap to -2^31, which the
	// epilogue must read as 2^31 (quant.AccFloat): the Go epilogue does,
	// the kernels' conversion does not, and the case is too rare to
	// teach them.
	wraps bool
}

func (f *linearFinish) finish(r0, c0, rows, cols int, sums []byte, lds int) {
	size := f.out.Size()
	var bias []float32
	if f.bias != nil {
		bias = f.bias[c0 : c0+cols]
	}
	for i := range rows {
		r := r0 + i
		xs := math.Float32frombits(binary.LittleEndian.Uint32(f.xs[4*r:]))
		at := (r*f.n + c0) * size
		if f.wraps {
			linearOutGeneric(f.out, sums[i*lds:i*lds+4*cols], xs, f.ws[c0:c0+cols], bias, f.dst[at:at+cols*size])
			continue
		}
		linearOut(f.out, sums[i*lds:i*lds+4*cols], xs, f.ws[c0:c0+cols], bias, f.dst[at:at+cols*size])
	}
}

func mmInt8(ctx context.Context, a *op.MMInt8Args) (op.MMInt8Result, error) {
	ab, err := a.A.Bytes()
	if err != nil {
		return op.MMInt8Result{}, err
	}
	bb, err := a.B.Bytes()
	if err != nil {
		return op.MMInt8Result{}, err
	}
	m, k, n := a.A.Dim(0), a.A.Dim(1), a.B.Dim(1)
	res, err := a.Result()
	if err != nil || m == 0 || n == 0 {
		return res, err
	}
	out := res.Out
	// b is [K, N]: read as it is for up to colsMax() rows; on the
	// assembly sets, up to fewMax rows packed a few panels at a time as
	// the few-row path's tiles need them (fewColsBody; packed whole, on a
	// 2-core Zen 4, 16 rows by 4096x4096 took 3.06 ms against 3.40 on the
	// many-row path and 4.57 with int16 panels); else packed whole.
	path := manyRows
	switch {
	case m <= colsMax():
		path = colsRows
	case m <= fewMax && impl != implGeneric:
		path = fewRows
	}
	p := newProduct(m, k, n, path)
	defer p.release()
	if err := parallelFor(ctx, &widenBody{p, ab}, m, max(1, grainBytes/max(1, k))); err != nil {
		return res, err
	}
	if err := p.setWeight(ctx, bb, true); err != nil {
		return res, err
	}
	dst, _ := out.Bytes()
	p.fin = &mmFinish{dst: dst, n: n, stream: streaming(len(dst))}
	if err := p.run(ctx); err != nil {
		return res, err
	}
	return op.MMInt8Result{Out: out}, nil
}

func int8Linear(ctx context.Context, a *op.LinearArgs) (op.Dequantized, error) {
	xb, err := a.X.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	wb, err := a.Weight.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	sb, err := a.WeightScale.Bytes()
	if err != nil {
		return op.Dequantized{}, err
	}
	var bb []byte
	if a.Bias != nil {
		if bb, err = a.Bias.Bytes(); err != nil {
			return op.Dequantized{}, err
		}
	}
	k, n := a.Weight.Dim(1), a.Weight.Dim(0)
	m := a.X.Numel() / a.X.Dim(-1)
	res, err := a.Result()
	if err != nil || m == 0 || n == 0 {
		return res, err
	}
	out := res.Out
	// A prepared weight, in this kernel set's panels: no packing for the
	// few-row and many-row paths. The one-row and dot paths stream the
	// plain weight instead (see linearPath).
	panels, err := preparedPanels(ctx, a, wb)
	if err != nil {
		return res, err
	}
	path := linearPath(m, k, panels != nil)
	if path == oneRow || path == dotRows {
		panels = nil
	}
	// 1. The activations, quantized row by row into the product's rows.
	prod := newProduct(m, k, n, path)
	defer prod.release()
	if panels != nil {
		prod.wp, prod.i8, prod.shared = panels, !prod.quads, true
	}
	p := &prepareBody{dt: a.X.DType(), src: xb, kx: a.X.Dim(-1), k: k, g: a.Group, act: a.InputAct,
		prod: prod, scales: smallBufs.get(4 * m)}
	defer smallBufs.put(p.scales)
	p.bad.reset()
	if err := parallelFor(ctx, p, m, max(1, grainBytes/(k*p.dt.Size()))); err != nil {
		return res, err
	}
	if r := p.bad.get(); r >= 0 {
		return res, backend.NonFinite(op.Int8Linear.Name(), r)
	}
	// 2. The weight, and the epilogue's per-channel scales and bias.
	if err := prod.setWeight(ctx, wb, false); err != nil {
		return res, err
	}
	f := &linearFinish{out: a.OutDType, n: n, xs: p.scales, ws: floats.get(n), wraps: k == op.MaxK}
	defer floats.put(f.ws)
	sdt := a.WeightScale.DType()
	if a.WeightScale.Numel() == 1 {
		s := loadScale(sdt, sb, 0)
		for i := range f.ws {
			f.ws[i] = s
		}
	} else {
		widenRow(sdt, sb, f.ws) // finite values: F16C widens them exactly
	}
	if a.Bias != nil {
		// rOut(bias), by a round trip through the output type. F16C
		// quiets a signaling float16 NaN, which rounding to float16 or
		// bfloat16 does anyway, and adding it (float32) does too.
		f.bias = floats.get(n)
		defer floats.put(f.bias)
		widenRow(a.Bias.DType(), bb, f.bias)
		if out := a.OutDType; out != dtype.Float32 {
			b := smallBufs.get(n * out.Size())
			storeRow(out, b, f.bias)
			widenRow(out, b, f.bias)
			smallBufs.put(b)
		}
	}
	f.dst, _ = out.Bytes()
	prod.fin = f
	// 3. The product, finished straight into the output.
	if err := prod.run(ctx); err != nil {
		return res, err
	}
	return op.Dequantized{Out: out}, nil
}

// prepareBody turns rows of x into quantized activation rows: the input
// activation, the rotation, rounding to x's dtype, row-wise quantization.
type prepareBody struct {
	dt       dtype.DType
	src      []byte
	kx, k, g int // x's row length, the layer's K, the ConvRot group (0: none)
	act      string
	prod     *product // gets the quantized rows
	scales   []byte
	bad      firstIndex
}

func (w *prepareBody) run(lo, hi int) {
	buf := getRowBufs(w.kx, w.dt.Size())
	defer rowBufPool.Put(buf)
	q := smallBufs.get(w.k)
	defer smallBufs.put(q)
	for r := lo; r < hi; r++ {
		row := w.src[r*w.kx*w.dt.Size() : (r+1)*w.kx*w.dt.Size()]
		b := buf.b[:w.k*w.dt.Size()] // the row to quantize
		if w.act != "" {
			activate(w.dt, w.act, row, b, buf.f)
			row = b
		}
		var bits uint32 // b's largest magnitude (absMaxBits)
		if w.g == 0 {
			b, bits = row, absMaxBits(w.dt, row)
		} else {
			bits = rotateRow(w.dt, row, b, w.g, buf.f) // row may be b
		}
		if quantizeRow(w.dt, b, bits, q, w.scales[4*r:], 0, 0) {
			w.bad.report(r)
			return
		}
		w.prod.setRow(r, q)
	}
}

// activate sets b (K elements of dt) to rT of int8_linear's input
// activation act of x's row: gelu_tanh of its K values, or swiglu of its
// [gate | up] halves. The assembly kernels do whole blocks (activateBlocks),
// Go the rest, through v, a float32 row as long as x's.
func activate(dt dtype.DType, act string, row, b []byte, v []float32) {
	k := len(b) / dt.Size()
	done := activateBlocks(dt, act, row, b)
	if done == k {
		return
	}
	x := v[:k-done]
	widenBlock(dt, row, done, x)
	switch act {
	case op.ActGeluTanh:
		for j, f := range x {
			x[j] = dt.Round(quant.GeluTanh(f))
		}
	case op.ActSwiGLU:
		up := v[k-done : 2*(k-done)]
		widenBlock(dt, row, k+done, up)
		for j, f := range x {
			x[j] = dt.Round(dt.Round(quant.Silu(f)) * up[j])
		}
	}
	storeBlock(dt, b, done, x)
}
