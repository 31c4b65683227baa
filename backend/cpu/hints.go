package cpu

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// hints say how a kernel call should treat memory: prefetch ahead bytes
// past each block it reads (the next row, for a row-wise caller), and
// store non-temporally (nt), past the caches, when the call's output
// would be evicted before anyone reads it. They never change a result;
// the Go kernels ignore them.
type hints struct {
	ahead int
	nt    bool
}

// streaming reports whether a call that reads and writes this many bytes
// in all should store its output non-temporally: when they exceed the
// last-level cache, the first outputs are evicted before the call ends,
// so caching them only costs a read of each line before it is written
// (and evicts the input the call is still reading).
func streaming(bytes int) bool { return bytes > lastLevelCache() }

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
// input: past the next page, where the hardware's stream prefetcher stops.
const flatAhead = 4096
