package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gokitchen/kitchen/eval"
)

func newEval() *cobra.Command {
	var (
		opts    eval.Options
		asJSON  bool
		svg     string
		include string
	)
	cmd := &cobra.Command{
		Use:   "eval ORIG QUANT",
		Short: "Measure each int8 layer of a converted checkpoint against the original",
		Long: `eval runs every int8 linear layer of QUANT (a checkpoint kitchen quantize or ComfyUI
wrote) through int8_linear, with its ConvRot rotation, on seeded random activations:
plain, and with a few large outlier channels as diffusion transformers' activations have.
Each layer's output is compared with the same layer of ORIG computed in float64, and the
relative errors are listed worst first: the figures to compare when choosing between
--per-tensor, the default and --convrot for a model. An int8 embedding table is looked
up, not multiplied: its figure (in both columns, averaged apart) is its dequantized
rows' relative error against ORIG's table. ORIG and QUANT may each be a .safetensors
file, a sharded checkpoint's *.safetensors.index.json, or a directory holding one index
or the checkpoint's .safetensors files.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Include, err = compileFlag("include", include); err != nil {
				return err
			}
			// The library reads 0 as its default; here each must be set.
			switch {
			case opts.Tokens < 1 || opts.Tokens > eval.MaxTokens:
				return fmt.Errorf("eval: --tokens must be 1 to %d, got %d", eval.MaxTokens, opts.Tokens)
			case opts.Outliers < 1:
				return fmt.Errorf("eval: --outliers must be at least 1, got %d (the plain activations have none)", opts.Outliers)
			case !(opts.OutlierScale > 0) || math.IsInf(opts.OutlierScale, 0):
				return fmt.Errorf("eval: --outlier-scale must be a finite number above 0, got %v", opts.OutlierScale)
			}
			if svg != "" {
				// Before the run, which may take minutes, rather than after.
				if fi, err := os.Stat(filepath.Dir(svg)); err != nil || !fi.IsDir() {
					return fmt.Errorf("eval: --svg %s: %s is not a directory", svg, filepath.Dir(svg))
				}
				if fi, err := os.Stat(svg); err == nil && !fi.Mode().IsRegular() {
					return fmt.Errorf("eval: --svg %s exists and is not a regular file", svg)
				}
			}
			var bar *progressBar
			if stderr := cmd.ErrOrStderr(); !asJSON && isTerminal(stderr) {
				bar = newProgressBar(stderr, "layers")
				opts.Progress = bar.update
			}
			rep, err := eval.Run(cmd.Context(), args[0], args[1], opts)
			bar.finish()
			if err != nil {
				return err
			}
			if svg != "" {
				var b bytes.Buffer
				if err := rep.WriteSVG(&b); err != nil {
					return err
				}
				if err := writeFileAtomic(svg, b.Bytes()); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return printEval(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Tokens, "tokens", 64, "activation rows per layer")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the activations")
	f.IntVar(&opts.Outliers, "outliers", 4, "outlier channels in the second set of activations")
	f.Float64Var(&opts.OutlierScale, "outlier-scale", 50, "how many times larger the outlier channels are")
	f.StringVar(&opts.Backend, "backend", "", "backend to run int8_linear (and ConvRot tables' dequantize) on (default: the registry's choice)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&svg, "svg", "", "also write a bar chart of the errors to this SVG file")
	f.StringVar(&include, "include", "", "evaluate only the layers whose names match this regular expression")
	return cmd
}

func printEval(w io.Writer, rep *eval.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAYER\tN×K\tSCALES\tCONVROT\tPLAIN\tOUTLIERS")
	for _, l := range rep.Layers {
		rot := "-"
		if l.ConvRot > 0 {
			rot = fmt.Sprint(l.ConvRot)
		}
		name := printable(l.Name)
		if l.Embedding {
			name += " (embedding: rows)"
		}
		fmt.Fprintf(tw, "%s\t%d×%d\t%s\t%s\t%.5f\t%.5f\n", name, l.N, l.K, l.Scales, rot, l.PlainError, l.OutlierError)
	}
	// The means: one figure a checkpoint, to set per-tensor, per-channel
	// and ConvRot files side by side; linear layers' output errors and
	// embedding tables' row errors apart, since they measure different
	// things.
	for _, kind := range []struct {
		label string
		table bool
	}{{"(mean, linear layers)", false}, {"(mean, embedding tables)", true}} {
		var plain, outliers, n float64
		for _, l := range rep.Layers {
			if l.Embedding == kind.table {
				plain, outliers, n = plain+l.PlainError, outliers+l.OutlierError, n+1
			}
		}
		if n > 0 {
			fmt.Fprintf(tw, "%s\t\t\t\t%.5f\t%.5f\n", kind.label, plain/n, outliers/n)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range rep.Layers {
		if l.Note != "" {
			fmt.Fprintf(w, "note: %s: %s (measured as kitchen reads it)\n", printable(l.Name), l.Note)
		}
	}
	what := fmt.Sprintf("relative output error ||y_int8 - y|| / ||y||, y from %s in float64", printable(rep.Original))
	if slices.ContainsFunc(rep.Layers, func(l eval.Layer) bool { return l.Embedding }) {
		what += "; embedding tables: relative weight error ||w' - w|| / ||w|| of the dequantized rows"
	}
	_, err := fmt.Fprintf(w, "\n%d layers, %d tokens each (seed %d; outliers: %d channels × %g); %s\n",
		len(rep.Layers), rep.Tokens, rep.Seed, rep.Outliers, rep.OutlierScale, what)
	return err
}

// writeFileAtomic writes b to path through a temporary file in the same
// directory, renamed over it, so a reader never sees half a file.
func writeFileAtomic(path string, b []byte) error {
	// Mode 0666 less the umask, as os.Create would give.
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.kitchen-tmp-%d", filepath.Base(path), os.Getpid()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
