package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/backend/cpu"
	"github.com/gokitchen/kitchen/dtype"
)

// TestProductsPeak runs the matrix products on a small shape: each entry
// has GOPS and, where the cpu kernels are assembly, the peak and the
// streaming speed measured in the same run and the ratios to them, for
// fresh and reused outputs.
func TestProductsPeak(t *testing.T) {
	res, err := Run(context.Background(), Config{Shape: []int{5, 64, 40}, DType: dtype.BFloat16, Warmup: 1, Runs: 2,
		Backends: []string{"cpu"}, Ops: []string{"mm_int8", "int8_linear"}})
	if err != nil {
		t.Fatal(err)
	}
	asm := cpu.PeakGOPS(1) > 0
	if len(res.Ops) != 4 {
		t.Fatalf("%d entries, want 4 (two operations, fresh and reused outputs): %+v", len(res.Ops), res.Ops)
	}
	for i, o := range res.Ops {
		if want := [2]string{"fresh", "reused"}[i%2]; o.Outputs != want {
			t.Errorf("entry %d (%s): outputs %q, want %q", i, o.Op, o.Outputs, want)
		}
		if (o.RatioToFreshFloor > 0) != (o.Outputs == "fresh") || o.RatioToFloor <= 0 {
			t.Errorf("%s, %s outputs: ratio to floor %v, to fresh floor %v", o.Op, o.Outputs, o.RatioToFloor, o.RatioToFreshFloor)
		}
		if o.GOPS <= 0 {
			t.Errorf("%s: GOPS %v", o.Op, o.GOPS)
		}
		if asm && (o.PeakGOPS <= 0 || o.RatioToPeak != o.GOPS/o.PeakGOPS || res.PeakGOPS != o.PeakGOPS) {
			t.Errorf("%s: peak %v, ratio %v (result's peak %v)", o.Op, o.PeakGOPS, o.RatioToPeak, res.PeakGOPS)
		}
		if !asm && (o.PeakGOPS != 0 || o.RatioToPeak != 0) {
			t.Errorf("%s: peak %v without assembly kernels", o.Op, o.PeakGOPS)
		}
		floor := float64(o.Bytes) / (o.StreamGBPerS * 1e9) * 1e3
		if asm && (o.StreamGBPerS <= 0 || o.StreamFloorMs != floor || o.RatioToStream != o.MedianMs/floor) {
			t.Errorf("%s: streaming %v GB/s, floor %v ms, ratio %v", o.Op, o.StreamGBPerS, o.StreamFloorMs, o.RatioToStream)
		}
		if !asm && (o.StreamGBPerS != 0 || o.RatioToStream != 0) {
			t.Errorf("%s: streaming %v GB/s without assembly kernels", o.Op, o.StreamGBPerS)
		}
	}
}

// TestLinearOptions runs int8_linear as a ConvRot layer with an input
// activation on every backend that takes it (swiglu's x is twice as wide,
// which the bytes moved show), and checks that bad options are errors
// that name them.
func TestLinearOptions(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Shape: []int{3, 64, 8}, DType: dtype.BFloat16, Warmup: 1, Runs: 1, Backends: []string{"cpu", "eager"}, Ops: []string{"int8_linear"}}
	plain, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Group, cfg.InputAct = 16, "swiglu"
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ConvRotGroup != 16 || res.InputAct != "swiglu" || len(res.Ops) != len(plain.Ops) || len(res.Ops) == 0 {
		t.Fatalf("group %d, activation %q, %d entries (%d plain)", res.ConvRotGroup, res.InputAct, len(res.Ops), len(plain.Ops))
	}
	if got, want := res.Ops[0].Bytes-plain.Ops[0].Bytes, int64(3*64*2); got != want {
		t.Errorf("swiglu moves %d more bytes than the plain layer, want %d (x's second half)", got, want)
	}
	// Bad options are the call's own errors, naming the parameter; so is
	// an option for an operation left out, or a shape int8_linear cannot
	// take.
	for _, bad := range []struct {
		Config
		want string
	}{
		{Config{Group: 8}, "int8_linear: group_size: option not accepted: 8"},
		{Config{Group: 256}, "int8_linear: weight: bad shape: last dimension 64 is not a multiple of the group size 256"},
		{Config{InputAct: "relu"}, `int8_linear: input_act: option not accepted: "relu"`},
		{Config{Group: 16, Ops: []string{"quantize_int8_rowwise"}}, "applies to int8_linear only"},
		{Config{Group: 16, Shape: []int{64, 64}}, "int8_linear: backend: no workload"},
		{Config{Ops: []string{"int8_linaer"}}, `no operation "int8_linaer" (there are `},
		{Config{Backends: []string{"cpu", "eagre"}}, `no backend "eagre" (there are `},
	} {
		c := cfg
		c.Group, c.InputAct = bad.Group, bad.InputAct
		if bad.Ops != nil {
			c.Ops = bad.Ops
		}
		if bad.Shape != nil {
			c.Shape, c.Ops = bad.Shape, nil
		}
		if bad.Backends != nil {
			c.Backends = bad.Backends
		}
		_, err := Run(ctx, c)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("group %d, activation %q, ops %v, shape %v: %v, want an error with %q", c.Group, c.InputAct, c.Ops, c.Shape, err, bad.want)
		}
	}
}

// TestBadConfig: settings out of range are refused with an error naming
// them, before anything is made. A shape whose size overflows once
// panicked making a slice, or, where the product of its dimensions
// wrapped around to 0, was said to have no elements.
func TestBadConfig(t *testing.T) {
	ok := Config{Shape: []int{3, 64, 8}, DType: dtype.BFloat16, Runs: 1, Ops: []string{"mm_int8"}}
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Runs = 0 }, "runs must be at least 1, got 0"},
		{func(c *Config) { c.Warmup = -1 }, "warmup must be 0 or more, got -1"},
		{func(c *Config) { c.Shape = []int{1 << 62, 4} }, "overflows"},
		{func(c *Config) { c.Shape = []int{1<<63 - 1, 2} }, "overflows"},
		{func(c *Config) { c.Shape = []int{8, 8, 1 << 62} }, "overflows"},
		{func(c *Config) { c.Shape = []int{8, 0, 8} }, "has no elements"},
		{func(c *Config) { c.Shape = []int{8, -1, 8} }, "negative dimension"},
	} {
		cfg := ok
		c.change(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", cfg, err, c.want)
		}
	}
}

// TestDeclined: a refusal keeps the named backend's own parameter and
// reason (its first, should it give several), and the lines group the
// operations of one backend and reason.
func TestDeclined(t *testing.T) {
	err := fmt.Errorf("dispatch: %w", &backend.NoCapableBackendError{Op: "quantize_int8_rowwise", Device: "npu:0", Declines: []backend.Decline{
		{Backend: "eager", Reason: "disabled"},
		{Backend: "cpu", Param: "device", Reason: "npu:0 not in [cpu]"},
		{Backend: "cpu", Reason: "unavailable"},
	}})
	ds := []Declined{
		declined("quantize_int8_rowwise", "cpu", err),
		declined("dequantize_int8", "ascend", &backend.NotImplementedError{Backend: "ascend", Op: "dequantize_int8"}),
		declined("quantize_int8_tensorwise", "cpu", err),
	}
	if want := (Declined{Op: "quantize_int8_rowwise", Backend: "cpu", Reason: "device: npu:0 not in [cpu]"}); ds[0] != want {
		t.Errorf("got %+v, want %+v", ds[0], want)
	}
	want := []string{
		"declined by cpu, not timed: quantize_int8_rowwise, quantize_int8_tensorwise (device: npu:0 not in [cpu])",
		"declined by ascend, not timed: dequantize_int8 (not implemented)",
	}
	if got := DeclinedLines(ds); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
