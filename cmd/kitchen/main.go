// Command kitchen runs kitchen's INT8 quantization kernels from the shell:
// it lists the backends and what they accept, and reports its version.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kitchen:", err)
		stop()
		os.Exit(1)
	}
}
