package tensor

import "golang.org/x/sys/unix"

// hugeThreshold is the size from which host tensors ask for transparent
// huge pages. A fresh multi-megabyte output is otherwise faulted in 4 KiB at
// a time, which costs more than the kernels that fill it.
const hugeThreshold = 8 << 20

// makeHost allocates n bytes, zeroed or of unspecified contents
// (makeUninit), advising the kernel to back large buffers with huge pages
// (a hint: it changes no contents and may be ignored; it reaches the pages
// not yet touched, which uncleared memory new from the system all is).
func makeHost(n int, zeroed bool) []byte {
	var b []byte
	if zeroed {
		b = make([]byte, n)
	} else {
		b = makeUninit(n)
	}
	if n >= hugeThreshold {
		const huge = 2 << 20
		// madvise needs a page-aligned start; advise the aligned interior.
		p := int(uintptrOf(b))
		start := (p + huge - 1) &^ (huge - 1)
		end := (p + n) &^ (huge - 1)
		if end > start {
			_ = unix.Madvise(b[start-p:end-p], unix.MADV_HUGEPAGE)
		}
	}
	return b
}
