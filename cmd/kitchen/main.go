// Command kitchen converts safetensors checkpoints to ComfyUI's
// int8_tensorwise format and back (quantize, dequantize), inspects them
// (inspect), measures each int8 layer's output error against the original
// (eval), lists the backends and what they accept (backends), times the
// INT8 operations against the machine's copy speed (bench), and prints its
// version and the Go toolchain that built it (version).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/gokitchen/kitchen/backend"
)

// stopSignals end a command. The first one cancels the command's context:
// a conversion stops, removes its temporary files and commits nothing, an
// inspection stops, and kitchen exits with 128 + the signal's number. A
// second one ends the process at once, with the signal's default action
// (a conversion's temporary files then remain, and the next run into the
// same output removes them).
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// signalError is the cause of a context cancelled by a signal.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string { return "interrupted by signal: " + e.sig.String() }

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, stopSignals...)
	go func() {
		sig := <-ch
		signal.Reset(stopSignals...)
		cancel(&signalError{sig})
	}()
	err := newRoot().ExecuteContext(ctx)
	// AscendCL asks to be finalized before the process exits; it does
	// nothing where CANN was never loaded.
	if ferr := finalizeDevices(); ferr != nil && err == nil {
		err = ferr
	}
	os.Exit(exitCode(os.Stderr, err, context.Cause(ctx)))
}

// exitCode reports err (if any) on w and returns the exit status: 0, 1,
// or 128 + the number of the signal that stopped the command.
func exitCode(w io.Writer, err, cause error) int {
	if err == nil {
		return 0
	}
	var se *signalError
	if errors.As(cause, &se) {
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintln(w, message(err))
		}
		fmt.Fprintln(w, "kitchen:", se)
		if n, ok := se.sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
		return 1
	}
	fmt.Fprintln(w, message(err))
	return 1
}

// message is err's line on standard error: "kitchen: " and the error,
// printable, without saying "kitchen: " twice: the library's argument
// errors (backend.ArgError) start with it, wrapped or not, and lose it
// here; nothing else is touched, so a path holding ": kitchen: " stays as
// it is.
func message(err error) string {
	msg := err.Error()
	for _, ae := range argErrors(err) {
		s := ae.Error()
		msg = strings.ReplaceAll(msg, s, strings.TrimPrefix(s, "kitchen: "))
	}
	return "kitchen: " + printableLines(msg)
}

// argErrors lists the *backend.ArgError values in err's tree.
func argErrors(err error) []*backend.ArgError {
	var out []*backend.ArgError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *backend.ArgError:
			out = append(out, e)
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// printable returns s with every character that a terminal would not
// print as itself (control characters, newlines included, escape
// sequences, invalid UTF-8, bidirectional overrides) escaped as in a Go
// string literal, so that a file's tensor names or metadata can neither
// write to the terminal nor forge lines of a table.
func printable(s string) string { return escape(s, false) }

// printableLines is printable keeping newlines: for error messages, whose
// lines are kitchen's.
func printableLines(s string) string { return escape(s, true) }

func escape(s string, lines bool) string {
	keep := func(r rune) bool { return lines && r == '\n' }
	if strings.IndexFunc(s, func(r rune) bool { return !keep(r) && (r == utf8.RuneError || !unicode.IsPrint(r)) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case keep(r):
			b.WriteByte('\n')
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsPrint(r) || r == utf8.RuneError:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
