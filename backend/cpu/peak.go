package cpu

import (
	"runtime"
	"sync"
	"time"

	"github.com/gokitchen/kitchen/dtype"
)

// PeakGOPS measures this machine's peak speed, for about d, at the
// arithmetic of the int8 product's tiles: their loop without its loads
// (VPMADDWD, then VPADDD into 12 independent accumulators, on registers;
// VPDPBUSD into them with AVX512-VNNI or AVX-VNNI, whose quad tiles do
// twice the multiply-adds per instruction) on GOMAXPROCS goroutines at
// once, in billions of operations per second, a multiply-add counting as
// two (as 2·M·N·K does). It returns 0 where the products do not run
// assembly (purego, other architectures, a CPU without AVX2). It is a
// measurement helper, for `kitchen bench` to state the products' speed as a
// share of it.
func PeakGOPS(d time.Duration) float64 {
	const chunk = 1 << 16 // iterations per call: about a tenth of a millisecond
	if peakLoop(1) == 0 {
		return 0
	}
	threads := runtime.GOMAXPROCS(0)
	ops := make([]int64, threads)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ops[i] += peakLoop(chunk)
				if !time.Now().Before(deadline) {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var total int64
	for _, o := range ops {
		total += o
	}
	return float64(total) / elapsed.Seconds() / 1e9
}

// StreamGBPerS reads b once on GOMAXPROCS goroutines at once, in
// contiguous parts, with the vector loads of the kernel set in use (its
// abs-max kernel, which does next to nothing with what it loads), and
// returns the speed in billions of bytes per second: how fast this
// machine streams memory that is only read, as a product of few rows
// reads its weight, for `kitchen bench` to state those products' speed as
// a share of it. b should not be in the caches. It returns 0 where the
// kernels are not assembly (plain Go loads are slower than the memory).
func StreamGBPerS(b []byte) float64 {
	if impl == implGeneric {
		return 0
	}
	threads := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range threads {
		lo, hi := len(b)*i/threads&^127, len(b)*(i+1)/threads&^127
		wg.Go(func() { absMaxBits(dtype.BFloat16, b[lo:hi]) })
	}
	wg.Wait()
	return float64(len(b)&^127) / time.Since(start).Seconds() / 1e9
}
