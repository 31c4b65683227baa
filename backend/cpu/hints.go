package cpu

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// hints say how a kernel call should treat memory: prefetch ahead bytes
// past each block it reads (the next row, for a row-wise caller that
// prefetches it; past the next row's block, for the next-row kernels), and
// store non-temporally (nt), past the caches, when the call's output
// would be evicted before anyone reads it. They never change a result;
// the Go kernels ignore them. Non-temporal stores are weakly ordered:
// parallelFor runs sfence on each thread once its parts are done, before
// the WaitGroup hands them back, which then publishes them as it does
// ordinary stores; a caller outside parallelFor must do the same. (The
// kernels do not fence each call: a row-wise pass calls them once per
// row.)
//
// bounded says every quotient of the quantization is below 2^15 in
// magnitude, as it is with a scale computed from the abs-max of what it
// divides (at most 190, for float16's subnormal divisors) or
// one checked against it: the kernels may then leave the clamp to 127 to
// the saturating packs. (Past 65504 a quotient rounded to float16 is an
// infinity, and past 2^31 any quotient, which VCVTPS2DQ turns into -2^31,
// as it does infinities.) It never changes a result.
type hints struct {
	ahead   int
	nt      bool
	bounded bool
}

// streaming reports whether an output of this many bytes should be
// stored non-temporally: larger than the last-level cache, it cannot stay
// cached until anyone reads it, so caching it only costs a read of each
// line before it is written, and evicts the input being read.
// (BenchmarkQDQ measured it a clear win for float32 outputs of four
// times the cache, and within noise below that.)
func streaming(outBytes int) bool { return outBytes > lastLevelCache() }

// lastLevelCache is the size in bytes of the largest cache of the CPU
// that runs the calling thread as Linux describes it, or 32 MiB where it
// does not say, read once.
var lastLevelCache = sync.OnceValue(func() int {
	largest := 0
	for i := 0; ; i++ {
		b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cache/index" + strconv.Itoa(i) + "/size")
		if err != nil {
			break
		}
		s, mult := strings.TrimSpace(string(b)), 1
		switch {
		case strings.HasSuffix(s, "K"):
			s, mult = s[:len(s)-1], 1<<10
		case strings.HasSuffix(s, "M"):
			s, mult = s[:len(s)-1], 1<<20
		}
		if v, err := strconv.Atoi(s); err == nil {
			largest = max(largest, v*mult)
		}
	}
	if largest == 0 {
		return 32 << 20
	}
	return largest
})

// flatAhead is how far ahead a tensor-wise quantization prefetches its
// input, and the next-row kernels the next row: past the next page, where
// the hardware's stream prefetcher stops.
const flatAhead = 4096
