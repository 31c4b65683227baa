package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/gokitchen/kitchen/convert"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/convbench"
	"github.com/gokitchen/kitchen/quant"
)

// convertFlags are the flags quantize and dequantize share.
type convertFlags struct {
	out     string
	backend string
	force   bool
	quiet   bool
	asJSON  bool
	dryRun  bool
}

func (f *convertFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "output file (for a sharded checkpoint, an index named *.safetensors.index.json)")
	fl.StringVar(&f.backend, "backend", "", "run on this backend (default: the fastest capable one)")
	fl.BoolVar(&f.force, "force", false, "replace an existing output")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but errors")
	fl.BoolVar(&f.asJSON, "json", false, "print the summary (or, with --dry-run, the plan) as JSON")
	_ = cmd.MarkFlagRequired("output")
}

func newQuantize() *cobra.Command {
	var (
		f                   convertFlags
		include, exclude    string
		opts                convert.Options
		perChannel, convrot bool
		convrotGroup        int
	)
	cmd := &cobra.Command{
		Use:   "quantize IN.safetensors -o OUT.safetensors",
		Short: "Convert a safetensors checkpoint to ComfyUI's int8_tensorwise format",
		Long: `quantize converts the linear weights of a checkpoint's repeated blocks (a .safetensors
file, or a .safetensors.index.json with its shards, or its directory) to int8 with float32 scales, one per
output row ([N, 1]) unless --per-tensor, in ComfyUI's int8_tensorwise layout with the
markers ComfyUI itself writes, and copies every other tensor unchanged.

By default a tensor is quantized when its name ends in .weight, it is 2-D, float32,
float16 or bfloat16, it sits inside a repeated block (a numeric name part that a
module path follows: "blocks.3.attn.qkv.weight", "model.layers.0.mlp.up_proj.weight"),
no part of its name looks like an embedder or a norm (contains "embed" or "norm"; is
"emb", "emb_*", "wte", "wpe", "ln", "ln_*", "ln1", "pos", "pos_*" or "position*"), both
sides are at least 64 (--min-features) and it has at least 16384 elements
(--min-elements). Input and patch embedders, time, text and caption embedders, final
layers, norms, biases and convolutions stay as they are. --embeddings also quantizes
embedding tables ("embed_tokens", "*embedding*", "wte", "wpe", "shared"), one scale per
row. --include RE replaces the name and size rules: 2-D float .weight tensors matching
RE are quantized. --exclude RE removes tensors. --dry-run shows every tensor's decision
and its reason.

--convrot rotates each layer's input dimension K in groups of 256 (--convrot-group, a
power of 4) before quantizing, as comfy-kitchen's quantize_int8_convrot_weight does;
where K is not a multiple of the group, the largest power of 4 below it that divides K
is used (as Comfy-Org's published files do), and a layer no power of 4 divides is
quantized per channel without rotation. Each quantized layer's weight error (relative
RMS error and SNR of the dequantized weight) is reported: --json lists every layer, the
summary the five worst.

An input that is quantized already (comfy_quant markers, _quantization_metadata, a
scaled_fp8 tensor, or a .weight in any dtype but F64, F32, F16 and BF16, such as int8,
fp8, fp4, fp6 or another integer type, with a weight_scale or scale_weight beside it)
is refused. The output is written to a temporary file beside it and renamed into place
when complete; an interrupted run leaves nothing behind, and the input is never
modified.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Include, err = compileFlag("include", include); err != nil {
				return err
			}
			if opts.Exclude, err = compileFlag("exclude", exclude); err != nil {
				return err
			}
			switch fl := cmd.Flags(); {
			case perChannel && opts.PerTensor:
				return fmt.Errorf("--per-channel and --per-tensor exclude each other")
			case convrot && opts.PerTensor:
				return fmt.Errorf("--convrot layers have one scale per row; drop --per-tensor")
			case fl.Changed("convrot-group") && !convrot:
				return fmt.Errorf("--convrot-group needs --convrot")
			case convrot && !quant.ValidGroup(convrotGroup):
				// The library reads a group of 0 as no rotation at all.
				return fmt.Errorf("--convrot-group %d is not a power of 4 of at least 4", convrotGroup)
			case opts.MinElements < 0 || opts.MinFeatures < 0:
				return fmt.Errorf("--min-elements and --min-features must be 0 (no limit) or more, got %d and %d", opts.MinElements, opts.MinFeatures)
			}
			if convrot {
				opts.ConvRot = convrotGroup
			}
			opts.MinElements = max(opts.MinElements, 1) // 0: no size limit
			opts.MinFeatures = max(opts.MinFeatures, 1)
			return runConvert(cmd, args[0], f, opts, convert.Quantize)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&opts.PerTensor, "per-tensor", false, "one scale per tensor ([]) instead of one per output row ([N, 1])")
	fl.BoolVar(&perChannel, "per-channel", false, "one scale per output row: the default, accepted for old scripts")
	fl.BoolVar(&convrot, "convrot", false, "rotate each layer's input dimension (ConvRot) before quantizing")
	fl.IntVar(&convrotGroup, "convrot-group", 256, "ConvRot group size, a power of 4 (with --convrot)")
	fl.BoolVar(&opts.Embeddings, "embeddings", false, "also quantize embedding tables (one scale per row)")
	fl.StringVar(&include, "include", "", "quantize 2-D float .weight tensors whose names match this regular expression")
	fl.StringVar(&exclude, "exclude", "", "never quantize tensors whose names match this regular expression")
	fl.Int64Var(&opts.MinElements, "min-elements", convert.DefaultMinElements, "smallest weight quantized by default (0: no limit)")
	fl.IntVar(&opts.MinFeatures, "min-features", convert.DefaultMinFeatures, "smallest input or output width quantized by default (0: no limit)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "show what would be quantized and copied, and why; write nothing")
	return cmd
}

func newDequantize() *cobra.Command {
	var (
		f        convertFlags
		dt       string
		allowInf bool
	)
	cmd := &cobra.Command{
		Use:   "dequantize IN.safetensors -o OUT.safetensors [--dtype bf16|fp16|fp32] [--allow-inf]",
		Short: "Convert int8_tensorwise layers back to floating point",
		Long: `dequantize converts every int8_tensorwise layer of a checkpoint (a .safetensors file, or a
.safetensors.index.json with its shards, or its directory) back to floating point, q * scale (rotated back
for ConvRot layers) rounded to --dtype, drops the scales, the comfy_quant markers and
_quantization_metadata, and copies every other tensor.

It reads what ComfyUI reads: configs in comfy_quant markers or _quantization_metadata,
ConvRot keys flat or under "params", the legacy "per_row" key, scales of shape [], [1],
[N, 1] or [N], int8 embedding tables. Anything else is an error naming the layer, and
nothing is written: an unknown format or key, a marker and metadata that disagree, a
layer without a weight_scale, an int8 weight with a scale but no config. A scale that is
not a finite number > 0 is an error naming the scale tensor. A value too large for
--dtype (float16 ends at 65504) is an error naming the tensor, unless --allow-inf lets it
be written as an infinity, as PyTorch (and ComfyUI) would.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := dtype.Parse(dt)
			if err != nil {
				return fmt.Errorf("--dtype: %w", err)
			}
			return runConvert(cmd, args[0], f, convert.Options{OutDType: out, AllowInf: allowInf}, convert.Dequantize)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&dt, "dtype", "bf16", "output dtype: bf16, fp16 or fp32")
	cmd.Flags().BoolVar(&allowInf, "allow-inf", false, "write values too large for --dtype as infinities, as PyTorch would, instead of failing")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "show what would be converted; write nothing")
	return cmd
}

func compileFlag(name, expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", name, err)
	}
	return re, nil
}

// runConvert runs a conversion with the shared flags: progress on a
// terminal, then a summary, the plan, JSON, or nothing.
func runConvert(cmd *cobra.Command, in string, f convertFlags, opts convert.Options,
	run func(ctx context.Context, in, out string, opts convert.Options) (*convert.Summary, error)) error {
	if f.out == "-" {
		// A checkpoint is written whole and renamed into place, and its
		// header goes first: there is no streaming it to a pipe.
		return errors.New("-o -: kitchen writes a file, not standard output; name one (./- for a file called -)")
	}
	opts.Backend, opts.Force, opts.DryRun = f.backend, f.force, f.dryRun
	stderr := cmd.ErrOrStderr()
	var bar *progressBar
	if !f.quiet && !f.asJSON && !f.dryRun && isTerminal(stderr) {
		bar = newProgressBar(stderr, "tensors")
		opts.Progress = bar.update
	}
	sum, err := run(cmd.Context(), in, f.out, opts)
	bar.finish()
	if err != nil {
		return err
	}
	if !f.quiet {
		for _, p := range sum.RemovedTemporaries {
			fmt.Fprintf(stderr, "kitchen: removed %s, a temporary file that an interrupted run left behind\n", printable(p))
		}
	}
	out := cmd.OutOrStdout()
	switch {
	case f.asJSON:
		err = writeJSON(out, sum)
	case f.quiet:
	case f.dryRun:
		err = printPlan(out, sum)
	default:
		err = printSummary(out, sum)
	}
	if err != nil && !f.dryRun {
		// The conversion is complete and in place; say so, since the
		// exit status will not.
		return fmt.Errorf("%s is written and complete, but the summary could not be printed: %w", sum.Output, err)
	}
	return err
}

func printPlan(w io.Writer, s *convert.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tTENSOR\tDTYPE\tSHAPE\tMB\tSCALES\tWHY")
	for _, it := range s.Plan {
		scales := it.Scales
		if it.ConvRot > 0 {
			scales += fmt.Sprintf(" ConvRot %d", it.ConvRot)
		}
		if scales == "" {
			scales = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%.2f\t%s\t%s\n", it.Action, printable(it.Name), it.DType, it.Shape, float64(it.Bytes)/1e6, scales, printable(it.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d to quantize, %d to dequantize, %d to copy, %d shard(s), %.1f MB in; nothing written (dry run)\n",
		s.Quantized, s.Dequantized, s.Copied, s.Shards, float64(s.BytesIn)/1e6)
	return nil
}

// worstLayers is how many layers the summary lists by weight error.
const worstLayers = 5

func printSummary(w io.Writer, s *convert.Summary) error {
	verb := fmt.Sprintf("%d quantized", s.Quantized)
	if s.Operation == "dequantize" {
		verb = fmt.Sprintf("%d dequantized", s.Dequantized)
	}
	backends := strings.Join(s.Backends, ", ")
	if backends == "" {
		backends = "none needed"
	}
	_, err := fmt.Fprintf(w, "wrote %s: %s, %d copied; %.1f MB in, %.1f MB out; %.2fs, %.0f MB/s; backend: %s\n",
		printable(s.Output), verb, s.Copied, float64(s.BytesIn)/1e6, float64(s.BytesOut)/1e6, s.Seconds, s.MBPerSecond, backends)
	if err != nil || len(s.Layers) == 0 {
		return err
	}
	worst := slices.Clone(s.Layers)
	slices.SortStableFunc(worst, func(a, b convert.LayerQuality) int { return cmp.Compare(b.RelRMSError, a.RelRMSError) })
	worst = worst[:min(len(worst), worstLayers)]
	fmt.Fprintf(w, "weight error of the dequantized weights, worst %d of %d layers (all of them: --json):\n", len(worst), len(s.Layers))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  LAYER\tSCALES\tREL RMS ERROR\tSNR")
	for _, l := range worst {
		scales := l.Scales
		if l.ConvRot > 0 {
			scales += fmt.Sprintf(" ConvRot %d", l.ConvRot)
		}
		snr := "exact"
		if l.SNR != nil {
			snr = fmt.Sprintf("%.1f dB", *l.SNR)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%.5f\t%s\n", printable(l.Name), scales, l.RelRMSError, snr)
	}
	return tw.Flush()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressBar draws one line on a terminal, at most ten times a second,
// counting units (tensors, or eval's layers).
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	unit  string
	start time.Time
	last  time.Time
	drawn bool
}

func newProgressBar(w io.Writer, unit string) *progressBar {
	return &progressBar{w: w, unit: unit, start: time.Now()}
}

func (b *progressBar) update(p convert.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && p.TensorsDone < p.TensorsTotal {
		return
	}
	b.last = now
	frac := 1.0
	if p.BytesTotal > 0 {
		frac = float64(p.BytesDone) / float64(p.BytesTotal)
	}
	const width = 30
	filled := int(frac * width)
	elapsed := now.Sub(b.start).Seconds()
	rate := float64(p.BytesDone) / 1e6 / max(elapsed, 1e-9)
	eta := "?"
	if p.BytesDone > 0 {
		eta = (time.Duration(elapsed/frac*(1-frac)) * time.Second).Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d %s  %.0f/%.0f MB  %.0f MB/s  ETA %s \x1b[K",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), p.TensorsDone, p.TensorsTotal, b.unit,
		float64(p.BytesDone)/1e6, float64(p.BytesTotal)/1e6, rate, eta)
	b.drawn = true
}

// finish clears the bar's line; it is safe on a nil bar.
func (b *progressBar) finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}

// benchConvert is `kitchen bench --convert FILE`: it converts FILE to a
// temporary output and times it against reading FILE and writing and
// syncing a file of the output's size, in the same rounds.
func benchConvert(cmd *cobra.Command, file string, asJSON bool) error {
	cfg := convbench.Config{Input: file}
	var other []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !slices.Contains([]string{"convert", "runs", "json", "verbose"}, f.Name) {
			other = append(other, "--"+f.Name)
		}
	})
	if len(other) > 0 {
		return fmt.Errorf("bench: --convert takes --runs and --json, not %s", strings.Join(other, ", "))
	}
	if cmd.Flags().Changed("runs") {
		if cfg.Runs, _ = cmd.Flags().GetInt("runs"); cfg.Runs < 1 {
			return fmt.Errorf("bench: runs must be at least 1, got %d", cfg.Runs)
		}
	}
	res, err := convbench.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	return res.WriteText(cmd.OutOrStdout())
}
