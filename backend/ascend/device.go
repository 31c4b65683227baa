package ascend

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/gokitchen/kitchen/tensor"
)

// Device is an Ascend NPU: a tensor.Device whose tensors live in NPU memory
// and whose primitives run as aclnn operators on one stream, so the eager
// backend runs on it unchanged. It is safe for concurrent use; operations
// on one device run one at a time.
//
// The NPU is opened by Open or by the first operation. Tensors move between
// host and NPU only through CopyFromHost and CopyToHost (tensor.Tensor.To);
// CopyDevice copies on the NPU (tensor.Copy). The fused kernels write
// caller-owned outputs (kitchen.Into) directly; the registry copies other
// backends' results into them with CopyDevice.
// A call of an operation copies nothing to the NPU and reads back to the
// host only a few bytes: the NaN check's result (quantizeRowwise,
// firstBadRow and firstFalse say how many); for dequantization, the index
// of the first scale that is not a finite number > 0, or -1 (firstFalse's
// 8 bytes; the check runs on the device); and, for tensor-wise
// quantization with a supplied scale tensor, that tensor's one element,
// which the registry's check of the arguments (op.TensorwiseArgs.Validate)
// copies to the host to see that it is finite and positive: 4 bytes for a
// float32 scale, 2 for float16 or bfloat16. int8_linear reads firstBadRow's
// 1 byte, and the registry's check of its weight scales
// (op.LinearArgs.Validate) copies them all to the host (N elements when
// there is one per channel); mm_int8 reads nothing. Of the eager
// primitives beyond Primitives, only GatherRows reads anything: the check
// of its indices, firstFalse's 8 bytes, and an index out of range (4 or 8
// bytes) to report it.
//
// Device memory is freed by Tensor.Release, or, for tensors that become
// unreachable without it, when the garbage collector finds them. The
// collector does not see NPU memory, so code that makes many large tensors
// should release them.
type Device struct {
	rt *Runtime
	id int

	mu     sync.Mutex // serializes all work on the device; guards the fields below
	opened bool
	ctx    uintptr // the context aclrtSetDevice made, made current on each OS thread that calls in
	stream uintptr
	closed bool

	// Allocations whose tensors the garbage collector found unreachable,
	// freed by whoever next holds mu (the collector never waits for it).
	lostMu sync.Mutex
	lost   []uintptr
}

var _ tensor.Device = (*Device)(nil)

// Type returns "npu".
func (d *Device) Type() string { return DeviceType }

// String names the device, e.g. "npu:0".
func (d *Device) String() string { return fmt.Sprintf("%s:%d", DeviceType, d.id) }

// Open opens the NPU if it is not open yet: aclrtSetDevice, the device's
// floating-point overflow mode set to INF/NaN (the mode in which infinities
// and NaN are kept, which the NaN check relies on) if it is in saturation
// mode, and the stream. The first operation on the device does the same;
// Open reports its errors early. If it fails, the device is reset and the
// next call tries again.
func (d *Device) Open() error {
	d.mu.Lock()
	defer d.unlock()
	if d.closed {
		return ErrClosed
	}
	if d.opened {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return d.open()
}

// open does Open's work. The caller holds mu on a locked OS thread; on
// success d's context is current.
func (d *Device) open() error {
	a := &d.rt.api
	if st := a.aclrtSetDevice(int32(d.id)); st != 0 {
		return d.rt.fail("aclrtSetDevice", st)
	}
	var ctx, stream uintptr
	err := func() error {
		if st := a.aclrtGetCurrentContext(&ctx); st != 0 {
			return d.rt.fail("aclrtGetCurrentContext", st)
		}
		// The mode applies to streams created after it is set.
		var mode int32
		if st := a.aclrtGetDeviceSatMode(&mode); st != 0 {
			return d.rt.fail("aclrtGetDeviceSatMode", st)
		}
		if mode != aclOverflowModeInfNaN {
			if st := a.aclrtSetDeviceSatMode(aclOverflowModeInfNaN); st != 0 {
				return fmt.Errorf("ascend: %v computes in saturation mode (aclrtFloatOverflowMode %d), which "+
					"turns infinities and NaN into finite numbers and so hides them from kitchen's NaN check, "+
					"and it cannot be switched to INF/NaN mode: %w", d, mode, d.rt.fail("aclrtSetDeviceSatMode", st))
			}
		}
		if st := a.aclrtCreateStream(&stream); st != 0 {
			return d.rt.fail("aclrtCreateStream", st)
		}
		return nil
	}()
	if err != nil {
		if st := a.aclrtResetDevice(int32(d.id)); st != 0 {
			err = errors.Join(err, d.rt.fail("aclrtResetDevice", st))
		}
		return err
	}
	d.ctx, d.stream, d.opened = ctx, stream, true
	return nil
}

// reset undoes open's aclrtSetDevice, for Finalize, once the runtime is
// closed: the device's memory goes with it, so Release frees nothing
// after it.
func (d *Device) reset() error {
	d.mu.Lock()
	defer d.unlock()
	if !d.opened {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if st := d.rt.api.aclrtResetDevice(int32(d.id)); st != 0 {
		return d.rt.fail("aclrtResetDevice", st)
	}
	d.opened, d.closed = false, true
	d.takeLost()
	return nil
}
