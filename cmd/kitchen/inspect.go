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
		Short: "List a checkpoint's tensors, dtypes, shapes, sizes and quantization formats",
		Long: `inspect reads a .safetensors file, or a .safetensors.index.json with its shards,
checks it thoroughly, and lists its tensors with the quantization formats found.`,
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
	fmt.Fprintf(w, "\n%d tensors in %d file(s), %.1f MB of data; dtypes: %s; quantized: %s\n",
		len(r.Tensors), len(r.Files), float64(r.DataBytes)/1e6, strings.Join(dts, ", "), strings.Join(formats, ", "))
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
