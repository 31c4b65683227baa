package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gokitchen/kitchen"
	"github.com/gokitchen/kitchen/backend"
)

func newRoot() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:           "kitchen",
		Short:         "Fast INT8 quantization kernels with backend dispatch",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if verbose {
				slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelDebug})))
			}
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log dispatch decisions to stderr")
	root.AddCommand(newQuantize(), newDequantize(), newInspect(), newEval(), newBackends(), newBench(), newVersion())
	return root
}

func newBackends() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "backends",
		Short: "List backends in priority order, whether they can run, and what each accepts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			infos := kitchen.ListBackends()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), infos)
			}
			return printBackends(cmd.OutOrStdout(), infos)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func printBackends(w io.Writer, infos []backend.Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRIORITY\tBACKEND\tKIND\tSTATUS")
	for i, b := range infos {
		status := "available"
		switch {
		case !b.Available:
			status = "unavailable: " + b.Reason
		case b.Disabled:
			status = "disabled"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i+1, b.Name, b.Kind, status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range infos {
		if len(b.Capabilities) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", b.Name)
		for _, op := range backend.Ops() {
			if cs, ok := b.Capabilities[op.Name()]; ok {
				fmt.Fprintf(w, "  %-30s %s\n", op.Name(), strings.Join(cs, "; "))
			}
		}
	}
	return nil
}

func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of kitchen and of the Go toolchain that built it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kitchen %s (%s) %s %s/%s\n", v.Version, v.Commit, v.Go, v.OS, v.Arch)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

type version struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func versionInfo() version {
	v := version{Version: "(devel)", Commit: "unknown", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		i := slices.IndexFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "vcs.revision" })
		if i >= 0 {
			v.Commit = bi.Settings[i].Value
		}
	}
	return v
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
