// Package bench measures the INT8 operations on every backend and, in the
// same run, the time this machine takes to copy the bytes each operation
// must move, so results can be stated as a ratio to that floor rather than
// as absolute times, which vary from machine to machine and run to run.
// Each operation is measured twice: allocating its outputs each call (as a
// plain call does; the bench releases them after it, so large host outputs
// are recycled, see tensor.Tensor.Release) and writing into the same
// caller-owned outputs every call (kitchen.Into). Fresh outputs are also
// held against a second floor: a copy into newly allocated Go memory.
// For the matrix products it also measures, in the same run, the machine's
// peak speed at the arithmetic of the cpu backend's kernel (cpu.PeakGOPS),
// and states their speed as a share of it.
package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/cpu"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/parcopy"
	"github.com/gokitchen/kitchen/op"
	"github.com/gokitchen/kitchen/tensor"
)

// Config says what to measure.
type Config struct {
	Shape  []int
	DType  dtype.DType
	Warmup int
	Runs   int
	// Backends to measure; empty means every available backend that
	// implements the operation.
	Backends []string
	// Device holds the input; nil means the host.
	Device tensor.Device
	// Ops to measure; empty means every operation with a workload for the
	// shape (the quantize and dequantize operations for a tensor's shape;
	// the matrix products, mm_int8 and int8_linear, for M, K, N).
	Ops []string
	// int8_linear's ConvRot group (0: none) and input activation ("":
	// none).
	Group    int
	InputAct string
}

// Result is one benchmark run. Its JSON form is what `kitchen bench --json`
// prints.
type Result struct {
	Shape   []int  `json:"shape"`
	DType   string `json:"dtype"`
	Runs    int    `json:"runs"`
	Warmup  int    `json:"warmup"`
	Threads int    `json:"threads"`
	// ConvRotGroup and InputAct are int8_linear's options (Config's Group
	// and InputAct), where set.
	ConvRotGroup int    `json:"convrot_group,omitempty"`
	InputAct     string `json:"input_act,omitempty"`
	// CPUKernels is the cpu backend's kernel set (cpu.KernelSet).
	CPUKernels string `json:"cpu_kernels"`
	// CopyGBPerS is the copy speed measured alongside the first backend,
	// FreshCopyGBPerS the speed of a copy into a freshly allocated buffer.
	CopyGBPerS      float64 `json:"copy_gb_per_s"`
	FreshCopyGBPerS float64 `json:"fresh_copy_gb_per_s,omitempty"`
	// PeakGOPS is the peak measured alongside the first backend (see
	// OpResult.PeakGOPS).
	PeakGOPS float64    `json:"peak_gops,omitempty"`
	Ops      []OpResult `json:"ops"`
	// Declined lists what a backend refused for these tensors: those are
	// not timed.
	Declined []Declined `json:"declined,omitempty"`
}

// Declined is an operation a backend refused, and why.
type Declined struct {
	Op      string `json:"op"`
	Backend string `json:"backend"`
	// Reason is the backend's own reason (backend.Decline: the parameter
	// and what is wrong), or the whole error where there is none.
	Reason string `json:"reason"`
}

// declined is op's refusal by the named backend: the reason that backend
// gave (the parameter, if any, and what is wrong), without the
// dispatcher's words around it.
func declined(op, name string, err error) Declined {
	d := Declined{Op: op, Backend: name, Reason: err.Error()}
	var ni *backend.NotImplementedError
	var nc *backend.NoCapableBackendError
	switch {
	case errors.As(err, &ni):
		d.Reason = "not implemented"
	case errors.As(err, &nc):
		for _, dec := range nc.Declines {
			if dec.Backend != name {
				continue
			}
			d.Reason = dec.Why()
			break
		}
	}
	return d
}

// DeclinedLines are ds a line a backend and reason, naming its operations,
// in the order they first appear: "declined by BACKEND, not timed: OP1,
// OP2 (REASON)". A device most backends cannot reach would otherwise give
// a line an operation, all with one reason. kitchen bench prints them, and
// they are the error of a run that timed nothing.
func DeclinedLines(ds []Declined) []string {
	type because struct{ backend, reason string }
	var order []because
	ops := map[because][]string{}
	for _, d := range ds {
		k := because{d.Backend, d.Reason}
		if ops[k] == nil {
			order = append(order, k)
		}
		ops[k] = append(ops[k], d.Op)
	}
	lines := make([]string, len(order))
	for i, k := range order {
		lines[i] = fmt.Sprintf("declined by %s, not timed: %s (%s)", k.backend, strings.Join(ops[k], ", "), k.reason)
	}
	return lines
}

// OpResult is one operation on one backend, with fresh or reused outputs.
type OpResult struct {
	Op      string `json:"op"`
	Backend string `json:"backend"`
	// Outputs is "fresh" (each call allocates its outputs, released after
	// it) or "reused" (every call writes the same caller-owned outputs).
	Outputs  string  `json:"outputs"`
	MeanMs   float64 `json:"mean_ms"`
	MedianMs float64 `json:"median_ms"`
	// Bytes is what the operation must read and write at the least.
	Bytes int64 `json:"bytes"`
	// CopyGBPerS is the copy speed measured alongside this backend; FloorMs
	// is the time to copy Bytes at that speed, and RatioToFloor the median
	// time over it.
	CopyGBPerS float64 `json:"copy_gb_per_s"`
	FloorMs    float64 `json:"floor_ms"`
	// GOPS is a matrix product's speed: 2·M·N·K operations over the median
	// time, in billions per second.
	GOPS         float64 `json:"gops,omitempty"`
	RatioToFloor float64 `json:"ratio_to_floor"`
	// FreshFloorMs is the time to copy Bytes at the speed of a copy into a
	// freshly allocated buffer, measured alongside; RatioToFreshFloor is the
	// median time over it. Both only for fresh outputs on the host.
	FreshFloorMs      float64 `json:"fresh_floor_ms,omitempty"`
	RatioToFreshFloor float64 `json:"ratio_to_fresh_floor,omitempty"`
	// StreamGBPerS is how fast this machine streamed memory that is only
	// read, measured in the same rounds for the matrix products on the
	// host (cpu.StreamGBPerS on a buffer of the largest prepared
	// product's Bytes, at least streamMinBytes, out of the caches, read
	// after the copy);
	// StreamFloorMs is the time to read Bytes at that speed, and
	// RatioToStream the median time over it: for a product of few rows,
	// which reads its weight once, its share of the machine's streaming
	// speed is 1 over it. Left out where the cpu kernels are not assembly.
	StreamGBPerS  float64 `json:"stream_gb_per_s,omitempty"`
	StreamFloorMs float64 `json:"stream_floor_ms,omitempty"`
	RatioToStream float64 `json:"ratio_to_stream,omitempty"`
	// PeakGOPS is this machine's peak at the arithmetic of the cpu
	// backend's product kernel (cpu.PeakGOPS: its multiply-adds, on
	// registers, on every thread): the highest of about as many
	// measurements as runs, half made just before this backend's rounds and
	// half just after (anything else running only lowers it). RatioToPeak
	// is GOPS over it. Both are left out when the tensors are not in host
	// memory or the cpu kernels are not assembly.
	PeakGOPS    float64 `json:"peak_gops,omitempty"`
	RatioToPeak float64 `json:"ratio_to_peak,omitempty"`
}

// streamMinBytes is the least the streaming reference reads: below it a
// read times little but its goroutines' start.
const streamMinBytes = 1 << 20

// evictBytes is the size of the buffer read before each product and the
// streaming reference, to put their operands out of the caches: twice the
// 32 MiB last-level cache of the 2-core Zen 3 that BENCHMARKS.md
// describes. (Where the caches are larger, an operand that fits them is
// partly read from them, the reference's alike.)
const evictBytes = 64 << 20

// peakTime is how long each measurement of the peak takes.
const peakTime = 30 * time.Millisecond

// ShortName is the dtype as the JSON output spells it: bf16, fp16, fp32.
func ShortName(d dtype.DType) string {
	switch d {
	case dtype.BFloat16:
		return "bf16"
	case dtype.Float16:
		return "fp16"
	case dtype.Float32:
		return "fp32"
	}
	return d.String()
}

// Run measures every operation on every chosen backend against a parallel
// copy of the input measured in the same rounds.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Runs < 1 {
		return nil, fmt.Errorf("bench: runs must be at least 1, got %d", cfg.Runs)
	}
	if !cfg.DType.IsFloat() {
		return nil, fmt.Errorf("bench: dtype %v is not float32, float16 or bfloat16", cfg.DType)
	}
	if cfg.Warmup < 0 {
		return nil, fmt.Errorf("bench: warmup must be 0 or more, got %d", cfg.Warmup)
	}
	// Refused here, before a product of dimensions that wrapped around
	// passes for no elements or the workloads size buffers from it.
	if err := tensor.CheckShape(dtype.Float32, cfg.Shape...); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if len(cfg.Shape) == 0 || tensor.Numel(cfg.Shape) == 0 {
		return nil, fmt.Errorf("bench: shape %v has no elements", cfg.Shape)
	}
	// A misspelt name would otherwise only narrow the run, silently (the
	// backends' names: backendsFor).
	var opNames []string
	for _, o := range backend.Ops() {
		opNames = append(opNames, o.Name())
	}
	if err := knownNames("operation", cfg.Ops, opNames); err != nil {
		return nil, err
	}
	spec := &backend.Spec{Shape: cfg.Shape, DType: cfg.DType, Device: cfg.Device, Group: cfg.Group, InputAct: cfg.InputAct}
	type prepared struct {
		name string
		w    *backend.Workload
	}
	var ops []prepared
	var copyBytes, productBytes int64
	// An operation that does not fit the shape is left out, unless --op
	// names it or the options set are its own (int8_linear's).
	linearOpts := cfg.Group != 0 || cfg.InputAct != ""
	for _, o := range backend.Ops() {
		if len(cfg.Ops) > 0 && !slices.Contains(cfg.Ops, o.Name()) {
			continue
		}
		w, err := o.Workload(ctx, backend.Default, spec)
		if errors.Is(err, backend.ErrNoWorkload) && len(cfg.Ops) == 0 && !(linearOpts && o == backend.Operation(op.Int8Linear)) {
			continue
		}
		var argErr *backend.ArgError
		if errors.As(err, &argErr) {
			return nil, err // it names the operation and the parameter
		}
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if w != nil {
			ops = append(ops, prepared{o.Name(), w})
			copyBytes = max(copyBytes, w.CopyBytes)
			if w.Ops > 0 {
				productBytes = max(productBytes, w.Bytes)
			}
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("bench: no operation %v has a workload for shape %v", cfg.Ops, cfg.Shape)
	}
	if linearOpts && !slices.ContainsFunc(ops, func(p prepared) bool { return p.name == op.Int8Linear.Name() }) {
		return nil, fmt.Errorf("bench: a ConvRot group or an input activation applies to int8_linear only, which --op %v leaves out", cfg.Ops)
	}
	// The copy floor is a host-memory figure: it means nothing for tensors
	// on an accelerator, so there it is left out.
	host := cfg.Device == nil || cfg.Device == tensor.CPU()

	type series struct {
		op     prepared
		reused bool
		run    func() error
		times  []time.Duration
	}
	names, err := backendsFor(cfg.Backends)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("bench: none of the backends %v is available", cfg.Backends)
	}
	// The copy buffers come from the same allocator as tensors (huge pages
	// where the host gives them), so the floor sees the same memory system.
	var copySrc, copyDst, evictBuf, streamBuf []byte
	if host {
		copySrc, copyDst = hostBuffer(copyBytes), hostBuffer(copyBytes)
	}
	res := &Result{
		Shape: cfg.Shape, DType: ShortName(cfg.DType), Runs: cfg.Runs, Warmup: cfg.Warmup,
		ConvRotGroup: cfg.Group, InputAct: cfg.InputAct,
		Threads: runtime.GOMAXPROCS(0), CPUKernels: cpu.KernelSet(),
	}
	// One phase per backend, in priority order: a slow backend's garbage
	// (eager allocates a gigabyte per call) would otherwise disturb the
	// timings of the fast ones. Within a phase the copy and the operations
	// alternate, so drift in the machine's speed affects them alike, and
	// each phase's ratios use its own copy speed.
	var pending []func() // the reused outputs of the phase under way
	defer func() {
		for _, release := range pending {
			release() // on an early return
		}
	}()
	for _, name := range names {
		var all []*series
		for _, o := range ops {
			// Only what the backend accepts for these tensors, on this device.
			if err := o.w.Check(ctx, backend.Default, name); err != nil {
				res.Declined = append(res.Declined, declined(o.name, name, err))
				continue
			}
			all = append(all, &series{op: o, run: func() error { return o.w.Run(ctx, backend.Default, name) }})
			run, release, err := o.w.Reuse(ctx, backend.Default, name)
			if err != nil {
				return nil, fmt.Errorf("bench: %s on %s: %w", o.name, name, err)
			}
			pending = append(pending, release)
			all = append(all, &series{op: o, reused: true, run: run})
		}
		if len(all) == 0 {
			continue
		}
		// The products' peak is a host figure too, measured only when a
		// product is timed: before the warm-up rounds and after the last
		// round, not between rounds, since right after the peak's loop on
		// every core the operations measured up to twice as slow (for a
		// millisecond operation).
		var peaks []float64
		gemm := host && slices.ContainsFunc(all, func(s *series) bool { return s.op.w.Ops > 0 })
		measurePeak := func() {
			for range (cfg.Runs + 1) / 2 {
				if p := cpu.PeakGOPS(peakTime); p > 0 {
					peaks = append(peaks, p)
				}
			}
		}
		if gemm {
			measurePeak()
		}
		// The streaming reference reads as many bytes as the largest product, at
		// least 1 MiB, from a buffer of its own, which, like the products'
		// operands, the round has not touched yet: a read of more would spread
		// its start-up thinner (on a 2-core Zen 5, 64 MiB read at 1.08-1.24
		// times the speed of 16 MiB, alternated in one process), and a read of
		// the buffer just read to evict the caches would find its pages'
		// translations ready (on that machine, a virtual one, the first read of
		// 72 MB in a round took 15-76 GB/s, the next, after the caches were
		// evicted again, 60-83).
		if gemm && streamBuf == nil {
			evictBuf, streamBuf = plainBuffer(evictBytes), plainBuffer(max(productBytes, streamMinBytes))
		}
		var streams []float64
		var copies, freshCopies []time.Duration
		for round := range cfg.Warmup + cfg.Runs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			measured := round >= cfg.Warmup
			if host {
				d, _ := timeIt(func() error { parcopy.Copy(copyDst, copySrc); return nil })
				f, err := timeIt(func() error { return freshCopy(copySrc) })
				if err != nil {
					return nil, fmt.Errorf("bench: the fresh copy: %w", err)
				}
				if measured {
					copies, freshCopies = append(copies, d), append(freshCopies, f)
				}
			}
			// The streaming reference (index len(all)) and the operations
			// take turns at going first: whatever follows the copies ran
			// slower (a one-row product's median 10-15% slower first than
			// second on a 2-core Zen 5, whichever series it was), and
			// turning the order each round leaves that to the medians to
			// drop instead of charging it to one series.
			steps := len(all)
			if gemm {
				steps++
			}
			for i := range steps {
				j := (i + round) % steps
				if gemm {
					// Each product starts with its operands out of the
					// caches, as the streaming reference does: otherwise
					// every series after the round's first would find the
					// weight that the one before it read (a few rows'
					// products, whose weight fits the last-level cache,
					// measured up to a third faster so). A read, which
					// leaves no dirty lines for the product to write back
					// (the copies' among them).
					parcopy.Read(evictBuf)
				}
				if j == len(all) {
					if g := cpu.StreamGBPerS(streamBuf); g > 0 && measured {
						streams = append(streams, g)
					}
					continue
				}
				s := all[j]
				d, err := timeIt(s.run)
				if err != nil {
					return nil, fmt.Errorf("bench: %s on %s: %w", s.op.name, name, err)
				}
				if measured {
					s.times = append(s.times, d)
				}
			}
		}
		for _, release := range pending {
			release()
		}
		pending = nil
		if gemm {
			measurePeak()
		}
		runtime.GC() // leave the next phase none of this one's garbage
		var gbps, freshGBps float64
		if host {
			gbps = float64(2*copyBytes) / median(copies).Seconds() / 1e9
			freshGBps = float64(2*copyBytes) / median(freshCopies).Seconds() / 1e9
		}
		if res.CopyGBPerS == 0 {
			res.CopyGBPerS, res.FreshCopyGBPerS = gbps, freshGBps
		}
		var peak float64
		if len(peaks) > 0 {
			peak = slices.Max(peaks) // anything else running only lowers it
		}
		if res.PeakGOPS == 0 {
			res.PeakGOPS = peak
		}
		for _, s := range all {
			r := OpResult{
				Op: s.op.name, Backend: name, Outputs: "fresh", MeanMs: ms(mean(s.times)), MedianMs: ms(median(s.times)),
				Bytes: s.op.w.Bytes, CopyGBPerS: gbps,
			}
			if s.reused {
				r.Outputs = "reused"
			}
			if host {
				r.FloorMs = float64(s.op.w.Bytes) / (gbps * 1e9) * 1e3
				r.RatioToFloor = r.MedianMs / r.FloorMs
				if !s.reused {
					r.FreshFloorMs = float64(s.op.w.Bytes) / (freshGBps * 1e9) * 1e3
					r.RatioToFreshFloor = r.MedianMs / r.FreshFloorMs
				}
			}
			if s.op.w.Ops > 0 {
				if len(streams) > 0 {
					r.StreamGBPerS = median(streams)
					r.StreamFloorMs = float64(s.op.w.Bytes) / (r.StreamGBPerS * 1e9) * 1e3
					r.RatioToStream = r.MedianMs / r.StreamFloorMs
				}
				r.GOPS = float64(s.op.w.Ops) / median(s.times).Seconds() / 1e9
				if peak > 0 {
					r.PeakGOPS, r.RatioToPeak = peak, r.GOPS/peak
				}
			}
			res.Ops = append(res.Ops, r)
		}
	}
	if len(res.Ops) == 0 {
		// Nothing to time is no result: say what each backend refused.
		return nil, fmt.Errorf("bench: no backend ran any of the operations on these tensors:\n  %s", strings.Join(DeclinedLines(res.Declined), "\n  "))
	}
	return res, nil
}

// freshCopy copies src in parallel into a newly allocated buffer (new Go
// memory, which the runtime zeroes first, as it does an output that no
// released tensor's memory can serve), and drops it.
func freshCopy(src []byte) error {
	t, err := tensor.Zeros(dtype.Uint8, len(src))
	if err != nil {
		return err
	}
	dst, err := t.Bytes()
	if err != nil {
		return err
	}
	parcopy.Copy(dst, src)
	return nil
}

// plainBuffer is n bytes of ordinary Go memory, every page faulted in:
// the streaming reference reads memory like the products' weights, which
// the workloads allocate so (on Linux, 4 KiB pages unless asked otherwise;
// streaming huge pages measured about 20% faster on the 2-core Zen 3).
func plainBuffer(n int64) []byte { return faultIn(make([]byte, n)) }

func hostBuffer(n int64) []byte {
	t, err := tensor.Zeros(dtype.Uint8, int(n))
	if err != nil {
		panic(err) // n is the size of a tensor that already exists
	}
	b, _ := t.Bytes()
	return faultIn(b)
}

// faultIn writes every byte of b, so that its pages are faulted in now,
// not in the first measurement, and returns it.
func faultIn(b []byte) []byte {
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// backendsFor lists the available backends, in priority order, limited to
// want when it is not empty; a name in want that no backend has is an
// error (a misspelt name would otherwise only narrow the run, silently).
func backendsFor(want []string) ([]string, error) {
	var out, all []string
	for _, b := range kitchen.ListBackends() {
		all = append(all, b.Name)
		if b.Available && !b.Disabled && (len(want) == 0 || slices.Contains(want, b.Name)) {
			out = append(out, b.Name)
		}
	}
	return out, knownNames("backend", want, all)
}

// knownNames returns an error naming the first of want that is not in
// known, and what is.
func knownNames(what string, want, known []string) error {
	for _, w := range want {
		if !slices.Contains(known, w) {
			return fmt.Errorf("bench: no %s %q (there are %s)", what, w, strings.Join(known, ", "))
		}
	}
	return nil
}

func timeIt(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func median[T time.Duration | float64](ds []T) T {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
