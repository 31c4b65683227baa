package ascend

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a CANN call that failed: the C function, the aclError or
// aclnnStatus it returned and the message aclGetRecentErrMsg gave for it.
// Functions that return a handle report failure as NULL; their Error has
// Code 0. Match it with errors.As.
type Error struct {
	Call    string
	Code    int32
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Code == 0 {
		fmt.Fprintf(&b, "ascend: %s returned NULL", e.Call)
	} else {
		fmt.Fprintf(&b, "ascend: %s failed with code %d", e.Call, e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// LibraryError says why a CANN library could not be used: every place
// tried and what went wrong there, or the function it lacks.
type LibraryError struct {
	Library string
	// Tried lists each attempt as "where: why".
	Tried []string
	// Symbol is set when the library loaded but lacks this function.
	Symbol string
}

func (e *LibraryError) Error() string {
	if e.Symbol != "" {
		return fmt.Sprintf("ascend: %s (%s) has no function %s; kitchen needs CANN 8.1 or newer",
			e.Library, strings.Join(e.Tried, ", "), e.Symbol)
	}
	return fmt.Sprintf("ascend: cannot load %s: tried %s; install CANN and source its set_env.sh "+
		"(which sets ASCEND_HOME_PATH), or set %s", e.Library, strings.Join(e.Tried, "; "), EnvLibDir)
}

// ErrNoDevice is wrapped by Load's error when CANN loads but reports no NPU.
var ErrNoDevice = errors.New("no Ascend NPU")

// ErrClosed is returned by operations on a device whose Runtime was closed.
var ErrClosed = errors.New("ascend: runtime closed")

// ErrFinalized is returned by Load (and so by Register, DefaultDevice and
// backend.Default's "ascend") after Finalize: AscendCL cannot be
// initialized again in the process.
var ErrFinalized = errors.New("ascend: AscendCL was finalized in this process (ascend.Finalize)")

// ErrInUse is wrapped by Finalize's error while runtimes returned by Load
// or Register are not closed.
var ErrInUse = errors.New("ascend: runtimes in use")
