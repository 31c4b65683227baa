//go:build unix

package convert

import (
	"os"
	"unsafe"

	"github.com/gokitchen/kitchen/safetensors"
	"golang.org/x/sys/unix"
)

// willNeed asks the kernel to start reading t's mapped bytes (from their
// first whole page: madvise takes page-aligned addresses), so that they
// arrive while the tensor before them is computed and written.
func willNeed(f *safetensors.File, t safetensors.TensorInfo) {
	b, err := f.Data(t) // a slice of the mapping: nothing is read yet
	if err != nil || len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	skip := int((page - uintptr(unsafe.Pointer(unsafe.SliceData(b)))%page) % page)
	if skip < len(b) {
		_ = unix.Madvise(b[skip:], unix.MADV_WILLNEED) // a hint only
	}
}
