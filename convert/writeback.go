package convert

import "os"

// writebackWindow is how many bytes are written between two early
// writebacks.
const writebackWindow = 32 << 20

// writeback writes to a file and has the disk take each window of
// writebackWindow bytes while the next is being written (flushRange, in a
// goroutine of its own), instead of leaving every page dirty in memory
// until the final sync: the disk then works during the whole conversion,
// and the final sync has little left to do. Write blocks while two
// windows wait for the disk, which bounds the dirty pages and holds the
// conversion to the disk's pace. The final fsync is still what makes the
// file durable: neither sync_file_range nor these syncs write metadata.
type writeback struct {
	f      *os.File
	n      int64 // bytes written through it
	queued int64 // the end of the last window handed to the flusher
	ranges chan [2]int64
	done   chan struct{}
	err    error // the flusher's first error, read after done
}

func newWriteback(f *os.File) *writeback {
	w := &writeback{f: f, ranges: make(chan [2]int64, 1), done: make(chan struct{})}
	go w.flush()
	return w
}

func (w *writeback) flush() {
	defer close(w.done)
	ok := true
	for r := range w.ranges {
		if !ok || w.err != nil {
			continue // drain, so that Write never blocks for good
		}
		ok, w.err = flushRange(w.f, r[0], r[1]-r[0])
	}
}

// Write writes p to the file, and hands on each window that it completes.
func (w *writeback) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.n += int64(n)
	if w.n-w.queued >= writebackWindow {
		w.ranges <- [2]int64{w.queued, w.n}
		w.queued = w.n
	}
	return n, err
}

// close stops the flusher, waits for it and returns its error.
func (w *writeback) close() error {
	close(w.ranges)
	<-w.done
	return w.err
}
