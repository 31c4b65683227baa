package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/safetensors"
)

func TestMain(m *testing.M) {
	// As a child process, be the command itself (TestSignals).
	if os.Getenv("KITCHEN_TEST_MAIN") == "1" {
		os.Args = append([]string{"kitchen"}, strings.Fields(os.Getenv("KITCHEN_TEST_ARGS"))...)
		main()
	}
	os.Exit(m.Run())
}

// TestSignals runs the command in a child process and stops it with each
// signal: it must exit at once with 128 + the signal's number (SIGHUP was
// not handled, and inspect ignored SIGINT).
func TestSignals(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc to know when the child handles signals")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KITCHEN_TEST_MAIN=1", "KITCHEN_TEST_ARGS=bench --shape 4,40 --warmup 1 --runs 1000000000 --backends eager")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			if errors.Is(err, syscall.ENOEXEC) {
				t.Skip("cannot re-execute the test binary here (under user-mode emulation?)")
			}
			t.Fatal(err)
		}
		waitCaught(t, cmd.Process.Pid, sig)
		time.Sleep(50 * time.Millisecond) // into the command
		start := time.Now()
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
			t.Errorf("%v: %v, want exit status %d\n%s", sig, err, 128+int(sig), stderr.String())
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %v to stop", sig, d)
		}
		if !strings.Contains(stderr.String(), "kitchen: interrupted by signal") {
			t.Errorf("%v: stderr %q", sig, stderr.String())
		}
	}
}

// waitCaught waits until process pid handles sig (its signal handler is
// installed), from /proc/pid/status.
func waitCaught(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
		if err == nil {
			for line := range strings.Lines(string(b)) {
				if hex, ok := strings.CutPrefix(line, "SigCgt:"); ok {
					var mask uint64
					for _, c := range strings.TrimSpace(hex) {
						mask = mask<<4 | uint64(strings.IndexRune("0123456789abcdef", c))
					}
					if mask&(1<<(sig-1)) != 0 {
						return
					}
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the child never handled %v", sig)
}

func itoa(n int) string {
	var b []byte
	for ; n > 0 || len(b) == 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestExitCode(t *testing.T) {
	var w bytes.Buffer
	if c := exitCode(&w, nil, nil); c != 0 || w.Len() != 0 {
		t.Errorf("no error: %d %q", c, w.String())
	}
	if c := exitCode(&w, errors.New("bad \x1b[2J name"), nil); c != 1 || w.String() != "kitchen: bad \\x1b[2J name\n" {
		t.Errorf("error: %d %q", c, w.String())
	}
	w.Reset()
	// The library's argument errors say "kitchen:" themselves.
	if c := exitCode(&w, &backend.ArgError{Op: "int8_linear", Param: "input_act", Row: -1, Err: backend.ErrOption}, nil); c != 1 || w.String() != "kitchen: int8_linear: input_act: option not accepted\n" {
		t.Errorf("argument error: %d %q", c, w.String())
	}
	w.Reset()
	if c := exitCode(&w, context.Canceled, &signalError{syscall.SIGHUP}); c != 129 || w.String() != "kitchen: interrupted by signal: hangup\n" {
		t.Errorf("SIGHUP: %d %q", c, w.String())
	}
}

// TestInspectFIFO: a named pipe fails at once (it used to block forever).
func TestInspectFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "f")
	if err := mkfifo(fifo); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { _, err := runCLI(t, "inspect", fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("inspect of a named pipe: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("inspect of a named pipe blocks")
	}
}

// TestInspectCancelled: inspect honours its context.
func TestInspectCancelled(t *testing.T) {
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"inspect", "../../testdata/tiny-dit.safetensors"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := root.ExecuteContext(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("inspect with a cancelled context: %v", err)
	}
}

// TestTerminalEscapes: names and metadata from a file never reach the
// terminal raw.
func TestTerminalEscapes(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	evil := "\x1b]0;owned\x07\x1b[2J\u202eevil.weight"
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, map[string]string{"\x1b[31mkey": "v"}, []safetensors.TensorInfo{{Name: evil, DType: "F32", Shape: []int{1, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	w.WriteTensor(evil, make([]byte, 4))
	os.WriteFile(in, buf.Bytes(), 0o644)
	for _, args := range [][]string{{"inspect", in}, {"quantize", in, "-o", filepath.Join(dir, "o.safetensors"), "--dry-run", "--min-elements", "1"}} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(out, "\x1b\x07\u202e") || !strings.Contains(out, `\x1b]0;owned\a\x1b[2J\u202eevil.weight`) {
			t.Errorf("%s printed %q", args[0], out)
		}
	}
}

// TestSummaryWords: a quantize that quantizes nothing says so.
func TestSummaryWords(t *testing.T) {
	out, err := runCLI(t, "quantize", "../../testdata/tiny-dit.safetensors", "-o", filepath.Join(t.TempDir(), "o.safetensors"), "--include", "^$")
	if err != nil || !strings.Contains(out, "0 quantized, 37 copied") {
		t.Errorf("%q %v", out, err)
	}
}

// failing is a writer that always fails, as stdout on a full disk.
type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestStdoutFails: when the summary cannot be printed, the error says that
// the output is written all the same.
func TestStdoutFails(t *testing.T) {
	out := filepath.Join(t.TempDir(), "o.safetensors")
	for _, args := range [][]string{{}, {"--json"}} {
		os.Remove(out)
		root := newRoot()
		root.SetOut(failing{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append([]string{"quantize", "../../testdata/tiny-dit.safetensors", "-o", out}, args...))
		err := root.Execute()
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), out+" is written and complete") {
			t.Errorf("%v: %v", args, err)
		}
		if _, serr := os.Stat(out); serr != nil {
			t.Errorf("%v: %v", args, serr)
		}
	}
}

// TestOutputDash: "-o -" is not standard output; it is refused rather than
// written as a file named "-".
func TestOutputDash(t *testing.T) {
	in, err := filepath.Abs("../../testdata/tiny-dit.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	for _, cmd := range []string{"quantize", "dequantize"} {
		_, err := runCLI(t, cmd, in, "-o", "-")
		if err == nil || !strings.Contains(err.Error(), "standard output") {
			t.Errorf("%s -o -: %v", cmd, err)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
