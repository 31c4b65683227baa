package convert

import "time"

// SlowWriter makes each written piece take ns nanoseconds a byte longer,
// as a slow disk would.
func SlowWriter(ns int) {
	writeHook = func(n int) { time.Sleep(time.Duration(n) * time.Duration(ns)) }
}

// NewBuffers is how many output buffers conversions have allocated so
// far, rather than reused from their lists.
func NewBuffers() int64 { return newBuffers.Load() }
