package ascend

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/tensor"
)

// do runs f in a session on d: the device to itself (opened first if need
// be), the calling goroutine on one OS thread with d's context current,
// and everything f creates released when it returns (its results too, if
// it fails). A panic in f ends the session like an error and is returned
// as one.
func do[T any](d *Device, f func(s *session) (T, error)) (v T, err error) {
	s, err := d.begin()
	if err != nil {
		return v, err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ascend: operation on %v panicked: %v", d, p)
		}
		if err = s.end(err); err != nil {
			var zero T
			v = zero
		}
	}()
	return f(s)
}

// session tracks what one operation creates on the device, so that all of
// it is released on every path: aclTensor, aclScalar and aclIntArray
// handles, workspaces and intermediate buffers, and, if the operation
// fails, its results.
type session struct {
	d        *Device
	api      *api
	tensors  []uintptr
	scalars  []uintptr
	arrays   []uintptr
	temps    []uintptr
	results  []*memory
	launched bool // operators queued since the last synchronization
}

func (d *Device) begin() (*session, error) {
	d.mu.Lock()
	if d.closed {
		d.unlock()
		return nil, ErrClosed
	}
	runtime.LockOSThread()
	var err error
	if !d.opened {
		err = d.open()
	} else if st := d.rt.api.aclrtSetCurrentContext(d.ctx); st != 0 {
		err = d.rt.fail("aclrtSetCurrentContext", st)
	}
	if err != nil {
		runtime.UnlockOSThread()
		d.unlock()
		return nil, err
	}
	d.freeLostLocked()
	return &session{d: d, api: &d.rt.api}, nil
}

// end waits for the queued operators, destroys the handles, frees the
// buffers and, if err is set or any of that fails, the results; it returns
// the first error.
func (s *session) end(err error) error {
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	if s.launched {
		keep(s.sync())
	}
	for _, t := range s.tensors {
		keep(s.check("aclDestroyTensor", s.api.aclDestroyTensor(t)))
	}
	for _, v := range s.scalars {
		keep(s.check("aclDestroyScalar", s.api.aclDestroyScalar(v)))
	}
	for _, a := range s.arrays {
		keep(s.check("aclDestroyIntArray", s.api.aclDestroyIntArray(a)))
	}
	for _, p := range s.temps {
		keep(s.check("aclrtFree", s.api.aclrtFree(p)))
	}
	for _, m := range s.results {
		if err != nil {
			if m.addr != 0 {
				s.d.rt.ignore(s.api.aclrtFree(m.addr)) // err says what went wrong
			}
			m.freed = true
		} else {
			m.watch()
		}
	}
	s.d.freeLostLocked()
	runtime.UnlockOSThread()
	s.d.unlock()
	return err
}

// check turns a non-zero status of call into an *Error.
func (s *session) check(call string, st int32) error {
	if st == 0 {
		return nil
	}
	return s.d.rt.fail(call, st)
}

func (s *session) sync() error {
	s.launched = false
	return s.check("aclrtSynchronizeStream", s.api.aclrtSynchronizeStream(s.d.stream))
}

// read waits for queued work and copies len(dst) bytes from device address
// src to dst.
func (s *session) read(dst []byte, src uintptr) error {
	if err := s.sync(); err != nil {
		return err
	}
	st := s.api.aclrtMemcpyToHost(unsafe.Pointer(&dst[0]), uintptr(len(dst)), src, uintptr(len(dst)), aclMemcpyDeviceToHost)
	return s.check("aclrtMemcpy", st)
}

// malloc allocates n > 0 bytes of device memory.
func (s *session) malloc(n int) (uintptr, error) {
	var p uintptr
	if st := s.api.aclrtMalloc(&p, uintptr(n), aclMemMallocHugeFirst); st != 0 {
		return 0, s.check("aclrtMalloc", st)
	}
	return p, nil
}

// result allocates an output tensor of the operation; it is freed if the
// operation fails.
func (s *session) result(dt dtype.DType, shape []int) (*tensor.Tensor, arr, error) {
	n := tensor.Numel(shape)
	m := &memory{dev: s.d, size: n * dt.Size()}
	if m.size > 0 {
		p, err := s.malloc(m.size)
		if err != nil {
			return nil, arr{}, err
		}
		m.addr = p
	}
	s.results = append(s.results, m)
	t, err := tensor.New(s.d, dt, shape, m)
	return t, arr{addr: m.addr, dt: aclType(dt), shape: []int64{int64(n)}}, err
}

// temp allocates an intermediate array of n elements of CANN type dt,
// freed when the session ends.
func (s *session) temp(dt int32, n int) (arr, error) {
	p, err := s.malloc(n * aclSize(dt))
	if err != nil {
		return arr{}, err
	}
	s.temps = append(s.temps, p)
	return arr{addr: p, dt: dt, shape: []int64{int64(n)}}, nil
}

// temporaries allocates an intermediate array of n elements of CANN type dt for
// each of ps.
func (s *session) temporaries(dt int32, n int, ps ...*arr) error {
	for _, p := range ps {
		a, err := s.temp(dt, n)
		if err != nil {
			return err
		}
		*p = a
	}
	return nil
}

// arr is an array in device memory as an operator sees it: an address, a
// CANN element type and a shape; contiguous, or, if strides is set, a
// strided view (view) of the storage elements from the address.
type arr struct {
	addr  uintptr
	dt    int32
	shape []int64

	strides []int64 // in elements; nil for a contiguous array
	offset  int64   // of the view's first element, in elements
	storage int64   // elements of the storage a view sees
}

// as returns a contiguous a with another shape of the same number of
// elements.
func (a arr) as(shape ...int) arr {
	s := make([]int64, len(shape))
	for i, n := range shape {
		s[i] = int64(n)
	}
	return arr{addr: a.addr, dt: a.dt, shape: s}
}

// view returns the strided view of the contiguous a with the given offset,
// shape and strides (in elements), which must stay within a. Operators
// read and write such views in place, so a slice of a buffer needs no copy
// (the aclnn headers kitchen uses say each operand may be non-contiguous).
func (a arr) view(offset int64, shape, strides []int64) arr {
	return arr{addr: a.addr, dt: a.dt, shape: shape, strides: strides, offset: offset, storage: count(a)}
}

// of returns tensor t of this device as an array of the given shape (its
// own number of elements; t's shape if none is given).
func (s *session) of(t *tensor.Tensor, shape ...int) (arr, error) {
	m, err := s.d.mem(t)
	if err != nil {
		return arr{}, err
	}
	if shape == nil {
		shape = t.Shape()
	}
	if tensor.Numel(shape) != t.Numel() {
		return arr{}, fmt.Errorf("ascend: view of %v as %v: %w", t, shape, tensor.ErrShape)
	}
	if len(shape) == 0 {
		shape = []int{1} // operators see scalars as one-element vectors
	}
	return arr{addr: m.addr, dt: aclType(t.DType())}.as(shape...), nil
}

// tensor creates the aclTensor describing a (format ND).
func (s *session) tensor(a arr) (uintptr, error) {
	dims := a.shape
	if len(dims) == 0 {
		dims = []int64{1}
	}
	strides, storage := a.strides, dims
	if strides == nil {
		strides = make([]int64, len(dims))
		stride := int64(1)
		for i := len(dims) - 1; i >= 0; i-- {
			strides[i] = stride
			stride *= dims[i]
		}
	} else {
		storage = []int64{a.storage}
	}
	t := s.api.aclCreateTensor(&dims[0], uint64(len(dims)), a.dt, &strides[0], a.offset, aclFormatND, &storage[0], uint64(len(storage)), a.addr)
	if t == 0 {
		return 0, s.d.rt.fail("aclCreateTensor", 0)
	}
	s.tensors = append(s.tensors, t)
	return t, nil
}

// tensorsOf creates the aclTensors of several arrays.
func (s *session) tensorsOf(as ...arr) ([]uintptr, error) {
	out := make([]uintptr, len(as))
	for i, a := range as {
		t, err := s.tensor(a)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// f32 creates a float32 aclScalar.
func (s *session) f32(v float32) (uintptr, error) {
	p := s.api.aclCreateScalar(unsafe.Pointer(&v), aclFloat)
	if p == 0 {
		return 0, s.d.rt.fail("aclCreateScalar", 0)
	}
	s.scalars = append(s.scalars, p)
	return p, nil
}

// f64 creates a double aclScalar.
func (s *session) f64(v float64) (uintptr, error) {
	p := s.api.aclCreateScalar(unsafe.Pointer(&v), aclDouble)
	if p == 0 {
		return 0, s.d.rt.fail("aclCreateScalar", 0)
	}
	s.scalars = append(s.scalars, p)
	return p, nil
}

// i64 creates an int64 aclScalar.
func (s *session) i64(v int64) (uintptr, error) {
	p := s.api.aclCreateScalar(unsafe.Pointer(&v), aclInt64)
	if p == 0 {
		return 0, s.d.rt.fail("aclCreateScalar", 0)
	}
	s.scalars = append(s.scalars, p)
	return p, nil
}

// ints creates an aclIntArray.
func (s *session) ints(v ...int64) (uintptr, error) {
	p := s.api.aclCreateIntArray(&v[0], uint64(len(v)))
	if p == 0 {
		return 0, s.d.rt.fail("aclCreateIntArray", 0)
	}
	s.arrays = append(s.arrays, p)
	return p, nil
}

// run calls an aclnn operator: the first phase, a workspace if it asks for
// one, and the second phase, which queues it on the device's stream (and
// frees the executor, whether it succeeds or not). An executor whose
// second phase is never called is destroyed.
func (s *session) run(name string, first func(ws *uint64, ex *uintptr) int32, second phase2) error {
	var size uint64
	var ex uintptr
	if st := first(&size, &ex); st != 0 {
		return s.check(name+"GetWorkspaceSize", st)
	}
	var ws uintptr
	if size > 0 {
		p, err := s.malloc(int(size))
		if err != nil {
			if derr := s.discard(ex); derr != nil {
				return errors.Join(err, derr)
			}
			return err
		}
		s.temps = append(s.temps, p)
		ws = p
	}
	s.launched = true
	return s.check(name, second(ws, size, ex, s.d.stream))
}

// discard destroys an executor that will not run. CANN documents
// aclDestroyAclOpExecutor for repeatable executors (aclnn/acl_meta.h pairs
// it with aclSetAclOpExecutorRepeatable), so the executor is made
// repeatable first.
func (s *session) discard(ex uintptr) error {
	if err := s.check("aclSetAclOpExecutorRepeatable", s.api.aclSetAclOpExecutorRepeatable(ex)); err != nil {
		return err
	}
	return s.check("aclDestroyAclOpExecutor", s.api.aclDestroyAclOpExecutor(ex))
}
