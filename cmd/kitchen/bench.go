package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/bench"
)

func newBench() *cobra.Command {
	var (
		shapes   []string
		dt       string
		device   string
		backends []string
		ops      []string
		cfg      bench.Config
		asJSON   bool
	)
	var convertFile string // --convert: time a conversion instead
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Time the INT8 operations on each backend against this machine's copy speed",
		Long: `bench times each INT8 operation on each backend (warm-up rounds, then measured
rounds, interleaved so that the machine's drift affects all alike) and, in the same
rounds, a parallel copy of the input. Each operation's floor is the time to copy the
bytes it must read and write at that speed; the ratio to it is the figure to compare
across machines.

--shape may be given more than once: each shape is timed in turn, its table (or with
--json its object) printed as it finishes. --op chooses operations. The matrix
products (mm_int8, int8_linear) take --shape M,K,N and also report GOPS, 2·M·N·K
operations per second; their floor is moving their operands and output (for few rows,
mostly the int8 weight's K·N bytes) at the copy speed. On the host they also report this machine's peak at the cpu kernel's arithmetic
(its int16 multiply-adds, or with AVX512-VNNI its byte multiply-adds, from registers
on every thread; the highest of about --runs measurements made just before and just
after each backend's rounds) and their share of it ("of peak"), and, in the same
rounds, how fast this machine streams memory that is only read (a parallel read, with
the cpu kernels' vector loads, of as many bytes as the largest product moves, 1 MiB at
least, out of the caches): "x stream" is the median time over the time to read the
bytes moved at that speed, the figure for products of few rows, which read their
weight once. On the host each product and the reference start with their operands out
of the caches (a parallel read of a 64 MiB buffer first, not timed), as a model's next
layer finds its weight. --convrot G and --input-act run int8_linear as a ConvRot layer
or one with an input activation runs.

A backend that declines an operation for these tensors (cpu for --device npu, say) is
not timed; a line a backend and reason says so, "declined by BACKEND, not timed: OP1,
OP2 (REASON)", and --json lists each refusal in "declined" as {"op", "backend",
"reason"}. When no backend times anything, bench fails with those lines.

--convert FILE times a conversion instead: see its flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if convertFile != "" {
				return benchConvert(cmd, convertFile, asJSON)
			}
			var err error
			cfg.Ops = ops
			// Every shape is checked before the first runs.
			parsed := make([][]int, len(shapes))
			for i, s := range shapes {
				if parsed[i], err = parseShape(s); err != nil {
					return err
				}
			}
			if cfg.DType, err = dtype.Parse(dt); err != nil {
				return fmt.Errorf("--dtype: %w", err)
			}
			cfg.Backends = backends
			if cfg.Device, err = benchDevice(device); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for i, shape := range parsed {
				cfg.Shape = shape
				res, err := bench.Run(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				if asJSON {
					err = writeJSON(w, res)
				} else {
					if i > 0 {
						fmt.Fprintln(w)
					}
					err = printBench(w, res)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&shapes, "shape", []string{"8352,3840"}, "tensor shape, comma-separated; repeat it to time several shapes in turn")
	f.StringVar(&dt, "dtype", "bf16", "input dtype: bf16, fp16 or fp32")
	f.StringVar(&device, "device", "cpu", "device holding the tensors: cpu, or npu (Ascend)")
	f.StringSliceVar(&backends, "backends", nil, "backends to time (default: every available one)")
	f.StringSliceVar(&ops, "op", nil, "operations to time (default: every one with a workload for --shape)")
	f.IntVar(&cfg.Warmup, "warmup", 3, "warm-up rounds, not measured")
	f.IntVar(&cfg.Runs, "runs", 10, "measured rounds")
	f.IntVar(&cfg.Group, "convrot", 0, "int8_linear: rotate x in ConvRot groups of `G` (a power of 4 dividing K), as a ConvRot layer does")
	f.StringVar(&cfg.InputAct, "input-act", "", "int8_linear: the input activation, gelu_tanh or swiglu (x is then [M, 2K])")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (one a shape, in turn, for several)")
	f.StringVar(&convertFile, "convert", "", "time a conversion (kitchen quantize) of `FILE` (a .safetensors file, a sharded index, or a directory holding one index and its shards) against reading it, writing+syncing its output's size, and doing both at once (--runs rounds, default 3)")
	return cmd
}

func parseShape(s string) ([]int, error) {
	var shape []int
	for _, p := range strings.Split(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bench: bad --shape %q: want positive integers separated by commas", s)
		}
		shape = append(shape, d)
	}
	return shape, nil
}

func printBench(w io.Writer, r *bench.Result) error {
	opts := ""
	if r.InputAct != "" {
		opts += ", int8_linear's input " + r.InputAct
	}
	if r.ConvRotGroup > 0 {
		opts += fmt.Sprintf(", ConvRot group %d", r.ConvRotGroup)
	}
	fmt.Fprintf(w, "%s %v%s, %d warm-up and %d measured rounds, %d threads, cpu kernels %s\n", r.DType, r.Shape, opts, r.Warmup, r.Runs, r.Threads, r.CPUKernels)
	if r.CopyGBPerS > 0 {
		fmt.Fprintf(w, "copy speed: %.2f GB/s (bytes read + written, parallel copy, measured with each backend); into a fresh buffer: %.2f GB/s\n", r.CopyGBPerS, r.FreshCopyGBPerS)
		fmt.Fprint(w, "outputs: fresh (allocated by each call, released after it) or reused (kitchen.Into); x floor: over the copy floor; x fresh: over the floor of a copy into new memory\n\n")
	} else {
		fmt.Fprint(w, "no copy floor: the tensors are not in host memory\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	gops := slices.ContainsFunc(r.Ops, func(o bench.OpResult) bool { return o.GOPS > 0 })
	peak := slices.ContainsFunc(r.Ops, func(o bench.OpResult) bool { return o.PeakGOPS > 0 })
	stream := slices.ContainsFunc(r.Ops, func(o bench.OpResult) bool { return o.RatioToStream > 0 })
	head := "operation\tbackend\toutputs\tmean ms\tmedian ms\tMB moved\tcopy GB/s\tfloor ms\tx floor\tx fresh\t"
	if gops {
		head += "GOPS\t"
	}
	if peak {
		head += "peak GOPS\tof peak\t"
	}
	if stream {
		head += "stream GB/s\tx stream\t"
	}
	fmt.Fprintln(tw, head)
	for _, o := range r.Ops {
		tail := "\n"
		if gops {
			tail = fmt.Sprintf("%.1f\t", o.GOPS)
			if peak && o.PeakGOPS > 0 {
				tail += fmt.Sprintf("%.1f\t%.2f\t", o.PeakGOPS, o.RatioToPeak)
			} else if peak {
				tail += "-\t-\t"
			}
			if stream && o.RatioToStream > 0 {
				tail += fmt.Sprintf("%.2f\t%.2f\t", o.StreamGBPerS, o.RatioToStream)
			} else if stream {
				tail += "-\t-\t"
			}
			tail += "\n"
		}
		if o.FloorMs == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.3f\t%.1f\t-\t-\t-\t-\t"+tail, o.Op, o.Backend, o.Outputs, o.MeanMs, o.MedianMs, float64(o.Bytes)/1e6)
			continue
		}
		fresh := "-"
		if o.RatioToFreshFloor > 0 {
			fresh = fmt.Sprintf("%.2f", o.RatioToFreshFloor)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.3f\t%.1f\t%.2f\t%.3f\t%.2f\t%s\t"+tail, o.Op, o.Backend, o.Outputs, o.MeanMs, o.MedianMs, float64(o.Bytes)/1e6, o.CopyGBPerS, o.FloorMs, o.RatioToFloor, fresh)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range bench.DeclinedLines(r.Declined) {
		fmt.Fprintln(w, printable(l))
	}
	// The seed's table: eager against the fastest other backend, both
	// allocating their outputs as a plain call does.
	var rows []string
	for _, o := range backend.Ops() {
		op := o.Name()
		var eager, best *bench.OpResult
		for i := range r.Ops {
			o := &r.Ops[i]
			if o.Op != op || o.Outputs != "fresh" {
				continue
			}
			if o.Backend == "eager" {
				eager = o
			} else if best == nil || o.MeanMs < best.MeanMs {
				best = o
			}
		}
		if eager != nil && best != nil {
			rows = append(rows, fmt.Sprintf("%s\t%.3f ms\t%.3f ms (%s)\t%.1f%%\t%.1fx\t", op, eager.MeanMs, best.MeanMs, best.Backend,
				100*(1-best.MeanMs/eager.MeanMs), eager.MeanMs/best.MeanMs))
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\teager mean\tfastest mean\timprovement\tspeed-up\t")
	for _, row := range slices.Clip(rows) {
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}
