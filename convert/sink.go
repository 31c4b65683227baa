package convert

import (
	"bufio"
	"io"
	"os"
)

// sink is where writeUnits streams an output file: Write appends to the
// stream, WriteAt writes a range the stream has passed (a layer's
// scales), settle makes what was written visible to WriteAt's file,
// finish puts everything in the file, and close stops what the sink
// started and reports what went wrong in the background.
type sink interface {
	io.Writer
	io.WriterAt
	settle() error
	finish() error
	close() error
}

// newSink writes f directly (O_DIRECT) where the system and file system
// allow it, and through the page cache with early writeback elsewhere.
func newSink(f *os.File) sink {
	if directIO {
		if s := newDirectSink(f); s != nil {
			return s
		}
	}
	wb := newWriteback(f)
	return &bufferedSink{Writer: bufio.NewWriterSize(wb, 4<<20), f: f, wb: wb}
}

// directIO can be turned off by tests, to run the buffered path where the
// direct one works.
var directIO = true

// bufferedSink writes through a buffer and the page cache.
type bufferedSink struct {
	*bufio.Writer
	f  *os.File
	wb *writeback
}

func (s *bufferedSink) WriteAt(p []byte, off int64) (int, error) { return s.f.WriteAt(p, off) }
func (s *bufferedSink) settle() error                            { return s.Flush() }
func (s *bufferedSink) finish() error                            { return s.Flush() }
func (s *bufferedSink) close() error                             { return s.wb.close() }
