//go:build !noascend

package kitchen

// The Ascend backend loads CANN at run time where it is installed and marks
// itself unavailable, with the reason, where it is not. On Linux it makes
// the binary use the system's dynamic loader (to dlopen CANN), though it
// links no library; build with -tags noascend for a fully static binary
// without it.
import _ "github.com/gokitchen/kitchen/backend/ascend"
