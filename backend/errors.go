package backend

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, wrapped by ArgError; match them with errors.Is. A shape
// that does not fit wraps tensor.ErrShape.
var (
	ErrNil       = errors.New("backend: missing")
	ErrEmpty     = errors.New("backend: empty tensor")
	ErrDType     = errors.New("backend: wrong dtype")
	ErrDevice    = errors.New("backend: wrong device")
	ErrNonFinite = errors.New("backend: NaN or infinity")
	ErrScale     = errors.New("backend: invalid scale")
	ErrOption    = errors.New("backend: option not accepted")
	// ErrAlias: a caller-owned output shares memory with an input or with
	// another output.
	ErrAlias = errors.New("backend: output overlaps")
)

// ErrNoWorkload is returned by an operation's workload preparation when
// the input does not fit the operation (a shape it cannot take); the
// benchmark then leaves the operation out.
var ErrNoWorkload = errors.New("backend: no workload for this input")

// ArgError reports a bad argument: the operation, the parameter, what is
// wrong (Err, one of the sentinels) and, for NaN or infinity in x, the first
// row holding one.
type ArgError struct {
	// Op is the operation's name.
	Op string
	// Param is the parameter, by the contract's name (x, scale, ...).
	Param string
	// Row is the first offending row (index over all dimensions but the
	// last) for ErrNonFinite, and -1 otherwise.
	Row int
	// Err is what is wrong: a sentinel (this package's, op's such as
	// op.ErrIndex, or tensor.ErrShape), for errors.Is.
	Err error
	// Detail says more, in words, where there is more to say.
	Detail string
}

// Error reads "kitchen: OP: PARAM: what is wrong", with the row and the
// detail where there are any.
func (e *ArgError) Error() string {
	var b strings.Builder
	// The sentinel's own package prefix would repeat what "kitchen:" says.
	what := "invalid"
	if e.Err != nil {
		what = e.Err.Error()
	}
	for _, pkg := range []string{"backend: ", "tensor: ", "op: "} {
		what = strings.TrimPrefix(what, pkg)
	}
	fmt.Fprintf(&b, "kitchen: %s: %s: %s", e.Op, e.Param, what)
	if e.Row >= 0 {
		fmt.Fprintf(&b, " in row %d", e.Row)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// Unwrap returns Err, so that errors.Is matches the sentinel.
func (e *ArgError) Unwrap() error { return e.Err }

// NonFinite returns the error for NaN or infinity in x at the given row.
func NonFinite(op string, row int) error { return NonFiniteIn(op, "x", row) }

// NonFiniteIn returns the error for NaN or infinity in the named parameter
// at the given row.
func NonFiniteIn(op, param string, row int) error {
	return &ArgError{Op: op, Param: param, Row: row, Err: ErrNonFinite}
}

// BackendNotFoundError reports a backend asked for by name that cannot be
// used: unknown, disabled, or unavailable on this machine.
type BackendNotFoundError struct {
	Name   string
	Reason string
}

func (e *BackendNotFoundError) Error() string {
	return fmt.Sprintf("backend: %q: %s", e.Name, e.Reason)
}

// NotImplementedError reports a backend asked for by name that does not
// implement the operation.
type NotImplementedError struct {
	Backend string
	Op      string
}

func (e *NotImplementedError) Error() string {
	return fmt.Sprintf("backend: %q does not implement %s", e.Backend, e.Op)
}

// Decline is one backend's reason for not taking a call.
type Decline struct {
	Backend string `json:"backend"`
	// Param is the parameter that failed a constraint ("x", "device",
	// "stochastic_rounding", ...); empty when the backend was skipped as a
	// whole (disabled, unavailable, operation not implemented).
	Param  string `json:"param,omitempty"`
	Reason string `json:"reason"`
}

// Why is the reason without the backend's name: "PARAM: REASON", or the
// reason alone where no parameter failed.
func (d Decline) Why() string {
	if d.Param == "" {
		return d.Reason
	}
	return d.Param + ": " + d.Reason
}

// String is "BACKEND: " and Why.
func (d Decline) String() string { return d.Backend + ": " + d.Why() }

// NoCapableBackendError reports that no backend accepts a call, with every
// backend's reason.
type NoCapableBackendError struct {
	Op       string
	Device   string
	Declines []Decline
}

func (e *NoCapableBackendError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend: no backend can run %s on %s", e.Op, e.Device)
	for _, d := range e.Declines {
		b.WriteString("\n  " + d.String())
	}
	return b.String()
}
