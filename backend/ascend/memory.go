package ascend

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// memory is the storage of a device tensor. Tensors that share it (those
// made by Reshape) share one allocation, freed once.
type memory struct {
	dev     *Device
	addr    uintptr // 0 for an empty tensor
	size    int
	freed   bool // guarded by dev.mu
	cleanup runtime.Cleanup
}

// watch arranges for the garbage collector to free m's allocation if m
// becomes unreachable without being released.
func (m *memory) watch() {
	if m.addr != 0 {
		m.cleanup = runtime.AddCleanup(m, m.dev.freeLost, m.addr)
	}
}

// freeLost is the garbage collector's cleanup of an allocation whose
// tensors became unreachable: it queues the address, to be freed at once
// if the device is idle, or else by the operation under way when it ends.
func (d *Device) freeLost(addr uintptr) {
	d.lostMu.Lock()
	d.lost = append(d.lost, addr)
	d.lostMu.Unlock()
	d.reap()
}

// takeLost empties the queue of lost allocations and returns it.
func (d *Device) takeLost() []uintptr {
	d.lostMu.Lock()
	defer d.lostMu.Unlock()
	lost := d.lost
	d.lost = nil
	return lost
}

func (d *Device) hasLost() bool {
	d.lostMu.Lock()
	defer d.lostMu.Unlock()
	return len(d.lost) > 0
}

// freeLostLocked frees the queued lost allocations. The caller holds mu, on
// a locked OS thread with d's context current.
func (d *Device) freeLostLocked() {
	for _, p := range d.takeLost() {
		d.rt.ignore(d.rt.api.aclrtFree(p))
	}
}

// unlock releases mu, then frees lost allocations that were queued while it
// was held, if no other call has taken mu meanwhile (that call does it when
// it unlocks). Every holder of mu unlocks it with this.
func (d *Device) unlock() {
	d.mu.Unlock()
	d.reap()
}

// reap frees the queued lost allocations if mu is free, without waiting.
func (d *Device) reap() {
	for d.hasLost() && d.mu.TryLock() {
		runtime.LockOSThread()
		ok := d.opened
		if ok {
			st := d.rt.api.aclrtSetCurrentContext(d.ctx)
			d.rt.ignore(st)
			ok = st == 0
		}
		if ok {
			d.freeLostLocked()
		}
		runtime.UnlockOSThread()
		d.mu.Unlock()
		if !ok {
			return // tried; the next operation retries
		}
	}
}

// mem returns the storage of t, which must be a live tensor of this device.
func (d *Device) mem(t *tensor.Tensor) (*memory, error) {
	if t == nil {
		return nil, fmt.Errorf("ascend: nil tensor")
	}
	m, ok := t.Storage().(*memory)
	if !ok || t.Device() != tensor.Device(d) || m.dev != d {
		return nil, fmt.Errorf("ascend: %v is not on %v", t, d)
	}
	if m.freed {
		return nil, fmt.Errorf("ascend: %v: %w", t, tensor.ErrReleased)
	}
	return m, nil
}

// Alloc returns a tensor in NPU memory with unspecified contents.
func (d *Device) Alloc(dt dtype.DType, shape []int) (*tensor.Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("ascend: alloc of invalid dtype %v", dt)
	}
	for _, n := range shape {
		if n < 0 {
			return nil, fmt.Errorf("ascend: alloc of shape %v: %w", shape, tensor.ErrShape)
		}
	}
	return do(d, func(s *session) (*tensor.Tensor, error) {
		t, _, err := s.result(dt, shape)
		return t, err
	})
}

// Release frees a tensor's NPU memory, and that of every tensor sharing it.
// Releasing twice does nothing, and so does releasing after Finalize, which
// freed all device memory.
func (d *Device) Release(t *tensor.Tensor) {
	m, ok := t.Storage().(*memory)
	if !ok || m.dev != d {
		return
	}
	d.mu.Lock()
	defer d.unlock()
	if m.freed {
		return
	}
	m.freed = true
	if m.addr == 0 {
		return
	}
	m.cleanup.Stop()
	if !d.opened {
		return // Finalize reset the device, and its memory with it
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if st := d.rt.api.aclrtSetCurrentContext(d.ctx); st != 0 {
		d.rt.ignore(st)
		return
	}
	d.rt.ignore(d.rt.api.aclrtFree(m.addr))
	d.freeLostLocked()
}

// CopyFromHost copies little-endian host bytes of dst's exact size into
// dst (aclrtMemcpy, host to device).
func (d *Device) CopyFromHost(dst *tensor.Tensor, src []byte) error {
	_, err := do(d, func(s *session) (struct{}, error) {
		m, err := d.mem(dst)
		if err != nil {
			return struct{}{}, err
		}
		if len(src) != m.size || len(src) != dst.Nbytes() {
			return struct{}{}, fmt.Errorf("ascend: copy of %d bytes into %v: %w", len(src), dst, tensor.ErrShape)
		}
		if len(src) == 0 {
			return struct{}{}, nil
		}
		st := d.rt.api.aclrtMemcpyToDevice(m.addr, uintptr(m.size), unsafe.Pointer(&src[0]), uintptr(len(src)), aclMemcpyHostToDevice)
		return struct{}{}, s.check("aclrtMemcpy", st)
	})
	return err
}

// CopyToHost copies src into host bytes of its exact size (aclrtMemcpy,
// device to host).
func (d *Device) CopyToHost(dst []byte, src *tensor.Tensor) error {
	_, err := do(d, func(s *session) (struct{}, error) {
		m, err := d.mem(src)
		if err != nil {
			return struct{}{}, err
		}
		if len(dst) != m.size || len(dst) != src.Nbytes() {
			return struct{}{}, fmt.Errorf("ascend: copy of %v into %d bytes: %w", src, len(dst), tensor.ErrShape)
		}
		if len(dst) == 0 {
			return struct{}{}, nil
		}
		return struct{}{}, s.read(dst, m.addr)
	})
	return err
}

var _ tensor.Copier = (*Device)(nil)

// CopyDevice copies src into dst, two tensors on d of one dtype and number
// of elements, with aclrtMemcpy DEVICE_TO_DEVICE: nothing passes through
// the host. The registry uses it (tensor.Copy) to deliver a result into a
// caller-owned output that a kernel did not write itself. Tensors over the
// same memory (Reshape's) are already equal, so nothing is copied.
func (d *Device) CopyDevice(dst, src *tensor.Tensor) error {
	_, err := do(d, func(s *session) (struct{}, error) {
		dm, err := d.mem(dst)
		if err != nil {
			return struct{}{}, err
		}
		sm, err := d.mem(src)
		if err != nil {
			return struct{}{}, err
		}
		if dst.DType() != src.DType() || dm.size != sm.size || dm.size != dst.Nbytes() {
			return struct{}{}, fmt.Errorf("ascend: copy of %v into %v: %w", src, dst, tensor.ErrShape)
		}
		if dm == sm || dm.size == 0 {
			return struct{}{}, nil
		}
		st := d.rt.api.aclrtMemcpyOnDevice(dm.addr, uintptr(dm.size), sm.addr, uintptr(sm.size), aclMemcpyDeviceToDev)
		return struct{}{}, s.check("aclrtMemcpy", st)
	})
	return err
}
