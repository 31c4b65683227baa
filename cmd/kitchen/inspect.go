package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gokitchen/kitchen/convert"
)

func newInspect() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "List a checkpoint's tensors and quantized layers, and flag what would not load",
		Long: `inspect reads a .safetensors file, a .safetensors.index.json with its shards, or a
directory holding one index or a checkpoint's .safetensors files; checks it thoroughly, and lists its tensors, then its quantized layers as
ComfyUI's loader reads them: format, scales (one per tensor, or per output channel),
ConvRot group, where the config is written (comfy_quant marker, _quantization_metadata).
A layer kitchen would not load (dequantize refuses it) is flagged with the reason, and
notes say where ComfyUI reads a layer otherwise than written (a 1-D scale, ConvRot under
"params" on an embedding).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := convert.Inspect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return printInspect(cmd.OutOrStdout(), r)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func printInspect(w io.Writer, r *convert.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tDTYPE\tSHAPE\tBYTES\tFORMAT\tSHARD")
	for _, t := range r.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\t%s\n", printable(t.Name), t.DType, t.Shape, t.Bytes, printable(t.Format), printable(filepath.Base(t.Shard)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var dts []string
	for dt, n := range r.DTypes {
		dts = append(dts, fmt.Sprintf("%s %d", dt, n))
	}
	slices.Sort(dts)
	var formats []string
	for f, n := range r.Formats {
		formats = append(formats, fmt.Sprintf("%s %d layers", printable(f), n))
	}
	slices.Sort(formats)
	if len(formats) == 0 {
		formats = []string{"none"}
	}
	bad := 0
	if len(r.Layers) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LAYER\tSHAPE\tFORMAT\tSCALES\tCONVROT\tCONFIG IN\tLOADS")
		for _, l := range r.Layers {
			loads, scales, group := "yes", l.Scales, "-"
			if l.Problem != "" {
				loads, scales = "NO: "+l.Problem, "?"
				bad++
			} else if l.Note != "" {
				loads = "yes; note: " + l.Note
			}
			if l.ConvRot > 0 {
				group = fmt.Sprint(l.ConvRot)
			}
			format := l.Format
			if format == "" {
				format = "?"
			}
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%s\n", printable(l.Name), l.Shape, printable(format), scales, group, l.Source, printable(loads))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n%d tensors in %d file(s), %.1f MB of data; dtypes: %s; quantized: %s\n",
		len(r.Tensors), len(r.Files), float64(r.DataBytes)/1e6, strings.Join(dts, ", "), strings.Join(formats, ", "))
	if bad > 0 {
		fmt.Fprintf(w, "%d layer(s) kitchen would not load (see LOADS)\n", bad)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "not loadable: %s\n", printable(p))
	}
	if len(r.Metadata) > 0 {
		var keys []string
		for k := range r.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(w, "metadata: %s\n", printable(strings.Join(keys, ", ")))
	}
	return nil
}
