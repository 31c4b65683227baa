package cpu

// The kernel sets, from slowest to fastest; builds without assembly have
// only the first.
const (
	implGeneric = iota
	implAVX2    // AVX2 and F16C
	implAVX512  // AVX512F and AVX512BW
)

// kernelSetNames names the kernel sets by their impl value.
var kernelSetNames = []string{"generic", "avx2", "avx512"}

// KernelSet names the kernel set this process's cpu kernels run:
// "avx512+vnni" (the int8 products with AVX512-VNNI), "avx512",
// "avx2+vnni" (the int8 products with AVX-VNNI), "avx2" or "generic" (pure
// Go: purego builds, other architectures, older CPUs).
// GODEBUG=cpu.avx512vnni=off, cpu.avx512f=off or cpu.avxvnni=off selects a
// lesser set on the same machine, for comparing them (the runtime warns
// that it does not know the first and last; golang.org/x/sys/cpu, which
// chooses the kernels, does). Benchmarks report it beside their figures.
func KernelSet() string {
	if impl != implGeneric && vnni {
		return kernelSetNames[impl] + "+vnni"
	}
	return kernelSetNames[impl]
}
