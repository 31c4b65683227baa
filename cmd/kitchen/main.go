// Command kitchen converts safetensors checkpoints to ComfyUI's
// int8_tensorwise format and back (quantize, dequantize), inspects them,
// lists the backends and what they accept, and times the INT8 operations
// against the machine's copy speed (bench).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kitchen:", err)
		stop()
		os.Exit(1)
	}
}
