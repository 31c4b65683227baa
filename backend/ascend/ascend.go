// Package ascend is kitchen's backend for Huawei Ascend NPUs: the device
// type "npu", whose tensors live in NPU memory and whose primitives are
// aclnn operators (eager.Primitives, eager.RotatePrimitives and
// eager.LinearPrimitives), so the eager backend runs every operation on the
// NPU unchanged, and the
// backend "ascend", with fused kernels for the INT8 operations: quantize
// and dequantize (kernels.go), mm_int8 and int8_linear (linear.go), each
// with its numeric bound stated there.
//
// CANN is bound at run time, never at build time: the package loads its
// libraries with dlopen through purego, so builds need no cgo and a machine
// without CANN gains no dependency. DefaultDirs says where it looks.
// Importing the package costs nothing at start-up: it registers "ascend"
// with backend.Default lazily, and CANN is loaded (and aclInit run), once
// per process, the first time the registry needs to know whether "ascend"
// can run (a call on an npu tensor that leaves the choice to the registry,
// a call that names "ascend", ListBackends) or DefaultDevice is called. If
// CANN does not load or there is no NPU, "ascend" is then marked
// unavailable with the reason (for a library that does not load, each
// path tried and why); the load is not tried again. Load and Register do the same at once for
// other registries and directories.
//
// CANN asks a process to call aclFinalize before it exits (acl/acl.h), and
// allows aclInit only once per process. Finalize does it: a program that
// used the NPU calls it at exit, after closing the runtimes it loaded
// itself; it closes backend.Default's runtime, resets the devices and
// finalizes AscendCL. It refuses while a runtime from Load or Register is
// open, and nothing in the package can use CANN after it.
//
// The package is tested against the CANN simulator in internal/ascendsim,
// or, with KITCHEN_ASCEND_HARDWARE=1, against the installed CANN.
package ascend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gokitchen/kitchen/backend"
)

// Name is the backend's registered name.
const Name = "ascend"

// DeviceType is the type of Ascend devices, as backend constraints see it:
// the name torch-npu gives them.
const DeviceType = "npu"

// EnvLibDir names the directory that, when set, is the only place searched
// for the CANN libraries.
const EnvLibDir = "KITCHEN_ASCEND_LIB_DIR"

// Options say where to find CANN and which NPU to use.
type Options struct {
	// Dirs are the directories searched for the libraries, in order. Nil
	// means DefaultDirs and then, unless KITCHEN_ASCEND_LIB_DIR is set, the
	// dynamic loader's own search.
	Dirs []string
	// DeviceID is the NPU to use; 0 is the first.
	DeviceID int
}

// DefaultDirs returns the directories searched when Options.Dirs is nil:
// $KITCHEN_ASCEND_LIB_DIR alone if it is set; otherwise
// $ASCEND_HOME_PATH/lib64 and $ASCEND_TOOLKIT_HOME/lib64 (CANN's
// set_env.sh sets both), /usr/local/Ascend/ascend-toolkit/latest/lib64
// (CANN's default install) and the directories of $LD_LIBRARY_PATH.
func DefaultDirs() []string {
	if d := os.Getenv(EnvLibDir); d != "" {
		return []string{d}
	}
	var dirs []string
	add := func(d string) {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, env := range []string{"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"} {
		if home := os.Getenv(env); home != "" {
			add(filepath.Join(home, "lib64"))
		}
	}
	add("/usr/local/Ascend/ascend-toolkit/latest/lib64")
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		add(d)
	}
	return dirs
}

// Runtime is CANN loaded into this process, with one NPU chosen.
type Runtime struct {
	api   api
	paths [numLibs]string
	dev   *Device
	open  bool // counted in acl.open: loaded and not yet closed; guarded by acl.mu
}

// acl is AscendCL in this process as the package initialized it: the
// libraries Load ran aclInit in, the runtimes it returned, and whether
// Finalize has run. Lock order: acl.mu before any Device.mu.
var acl struct {
	mu        sync.Mutex
	libs      []*aclLib  // each libascendcl.so object aclInit ran in (or had run in)
	runtimes  []*Runtime // the runtimes Load returned, less those closed with their device never opened
	open      int        // runtimes returned by Load and not yet closed
	def       *Runtime   // backend.Default's runtime (loadDefault), which Finalize closes itself
	finalized bool
}

// aclLib is one library object, told apart by its dlopen handle (loads of
// one file by two paths share it), and the functions bound to it.
type aclLib struct {
	handle uintptr
	api    *api
	done   bool // aclFinalize succeeded
}

// finalized reports whether Finalize has run.
func finalized() bool {
	acl.mu.Lock()
	defer acl.mu.Unlock()
	return acl.finalized
}

// Load loads the CANN libraries, initializes AscendCL and checks that the
// NPU exists. It fails with a *LibraryError when a library cannot be
// loaded, an *Error when a call fails, or an error wrapping ErrNoDevice
// when there is no such NPU. The NPU itself is opened by Device.Open or
// the first operation on it.
//
// AscendCL can be initialized once per process, so a second Load shares
// the first one's initialization; Runtime.Close never finalizes it, and
// after Finalize, Load fails with ErrFinalized.
func Load(opts Options) (*Runtime, error) { return loadRuntime(opts, false) }

// loadRuntime is Load; isDefault marks backend.Default's runtime.
func loadRuntime(opts Options, isDefault bool) (*Runtime, error) {
	if finalized() {
		return nil, ErrFinalized
	}
	dirs, system := opts.Dirs, false
	if dirs == nil {
		dirs, system = DefaultDirs(), os.Getenv(EnvLibDir) == ""
	}
	r := &Runtime{}
	paths, handle, err := openLibraries(&r.api, dirs, system)
	if err != nil {
		return nil, err
	}
	r.paths = paths
	a := &r.api

	acl.mu.Lock()
	defer acl.mu.Unlock()
	if acl.finalized {
		return nil, ErrFinalized
	}
	// The runtime's current context is per OS thread: stay on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if st := a.aclInit(nil); st != 0 && st != aclErrorRepeatInit {
		return nil, r.fail("aclInit", st)
	}
	a.aclGetRecentErrMsg() // forget the message of a repeated initialization
	if !slices.ContainsFunc(acl.libs, func(l *aclLib) bool { return l.handle == handle }) {
		acl.libs = append(acl.libs, &aclLib{handle: handle, api: a})
	}
	var count uint32
	if st := a.aclrtGetDeviceCount(&count); st != 0 {
		return nil, r.fail("aclrtGetDeviceCount", st)
	}
	if count == 0 {
		return nil, fmt.Errorf("ascend: aclrtGetDeviceCount reports 0 devices (libraries from %s): %w", paths[libACL], ErrNoDevice)
	}
	if opts.DeviceID < 0 || opts.DeviceID >= int(count) {
		return nil, fmt.Errorf("ascend: device %d requested, aclrtGetDeviceCount reports %d: %w", opts.DeviceID, count, ErrNoDevice)
	}
	r.dev = &Device{rt: r, id: opts.DeviceID}
	r.open = true
	acl.open++
	acl.runtimes = append(acl.runtimes, r)
	if isDefault {
		acl.def = r
	}
	return r, nil
}

// fail makes the Error for a call that returned st, with the message the
// runtime recorded for it on this thread (reading it clears it).
func (r *Runtime) fail(call string, st int32) error {
	return &Error{Call: call, Code: st, Message: r.api.aclGetRecentErrMsg()}
}

// ignore clears the message of a failed call whose status st the caller
// does not report, so that no later error carries it.
func (r *Runtime) ignore(st int32) {
	if st != 0 {
		r.api.aclGetRecentErrMsg()
	}
}

// Device returns the NPU this runtime uses. It is opened by its first
// operation.
func (r *Runtime) Device() *Device { return r.dev }

// Libraries returns the paths the three libraries were loaded from (a bare
// name when the dynamic loader found it).
func (r *Runtime) Libraries() []string { return r.paths[:] }

// Close waits for the device's work to finish and destroys its stream.
// Tensors on the device can still be released (until Finalize, which
// frees all device memory); nothing else runs on it. If waiting or
// destroying fails, the device stays open and Close can be called again.
// A closed runtime no longer keeps Finalize from running.
func (r *Runtime) Close() error {
	opened, err := r.close()
	if err == nil {
		acl.mu.Lock()
		if r.open {
			r.open = false
			acl.open--
		}
		if !opened { // nothing for Finalize to reset
			acl.runtimes = slices.DeleteFunc(acl.runtimes, func(x *Runtime) bool { return x == r })
		}
		acl.mu.Unlock()
	}
	return err
}

// close is Close's work on the device, without the count of open runtimes
// (Finalize, which holds acl.mu, closes backend.Default's runtime with it).
// It reports whether the device was ever opened (and not yet reset).
func (r *Runtime) close() (opened bool, err error) {
	d := r.dev
	d.mu.Lock()
	defer d.unlock()
	if d.closed {
		return d.opened, nil
	}
	if !d.opened {
		d.closed = true
		return false, nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if st := r.api.aclrtSetCurrentContext(d.ctx); st != 0 {
		return true, r.fail("aclrtSetCurrentContext", st)
	}
	d.freeLostLocked()
	if st := r.api.aclrtSynchronizeStream(d.stream); st != 0 {
		return true, r.fail("aclrtSynchronizeStream", st)
	}
	if st := r.api.aclrtDestroyStream(d.stream); st != 0 {
		return true, r.fail("aclrtDestroyStream", st)
	}
	d.closed = true
	return true, nil
}

// Finalize ends AscendCL in this process, as acl/acl.h asks a process to
// do before it exits: it closes backend.Default's runtime (the one
// DefaultDevice and the lazy "ascend" use, after its work under way ends),
// resets every NPU the package opened (aclrtResetDevice, which frees what
// is left of its memory) and calls aclFinalize in each CANN library the
// package initialized. Call it once, at exit, from the program that owns
// the process (a command's main, after its last NPU operation); a library
// that shares AscendCL with other code in the process must leave it to
// that code.
//
// It refuses, changing nothing, with an error wrapping ErrInUse while a
// runtime returned by Load or Register is not closed: close those first.
// After it, operations on NPU tensors fail with ErrClosed, Release does
// nothing, and Load (so Register, DefaultDevice and "ascend" in
// backend.Default) fails with ErrFinalized: CANN allows aclInit only once
// per process. Calling it again, or when CANN was never loaded, does
// nothing more. If a CANN call fails, it returns that *Error, and a later
// call finishes the work.
func Finalize() error {
	acl.mu.Lock()
	defer acl.mu.Unlock()
	if acl.finalized {
		return nil
	}
	def, n := acl.def, acl.open
	if def != nil && def.open {
		n--
	}
	if n > 0 {
		return fmt.Errorf("%w: %d runtime(s) from Load or Register not closed", ErrInUse, n)
	}
	if def != nil && def.open {
		if _, err := def.close(); err != nil {
			return err
		}
		def.open = false
		acl.open--
	}
	for _, r := range acl.runtimes {
		if err := r.dev.reset(); err != nil {
			return err
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, l := range acl.libs {
		if l.done {
			continue
		}
		if st := l.api.aclFinalize(); st != 0 {
			return &Error{Call: "aclFinalize", Code: st, Message: l.api.aclGetRecentErrMsg()}
		}
		l.done = true
	}
	acl.finalized, acl.runtimes = true, nil
	return nil
}

// Register loads CANN as Load does and registers the ascend backend with
// reg. When CANN cannot be used it marks "ascend" unavailable in reg with
// the reason and returns the error.
func Register(reg *backend.Registry, opts Options) (*Runtime, error) {
	r, err := Load(opts)
	if err != nil {
		reg.MarkUnavailable(Name, backend.Accelerator, strings.TrimPrefix(err.Error(), "ascend: "))
		return nil, err
	}
	if err := reg.Register(New()); err != nil {
		return nil, errors.Join(err, r.Close())
	}
	return r, nil
}

// loaded is the runtime behind backend.Default's "ascend", loaded on first
// need, or why there is none.
var loaded struct {
	once sync.Once
	rt   *Runtime
	err  error
}

func loadDefault() (*Runtime, error) {
	loaded.once.Do(func() { loaded.rt, loaded.err = loadRuntime(Options{}, true) })
	return loaded.rt, loaded.err
}

func init() {
	err := backend.Default.RegisterLazy(Name, backend.Accelerator, []string{DeviceType}, func() (backend.Backend, error) {
		if _, err := loadDefault(); err != nil {
			return backend.Backend{}, errors.New(strings.TrimPrefix(err.Error(), "ascend: "))
		}
		return New(), nil
	})
	if err != nil {
		panic(err)
	}
}

// DefaultDevice returns the NPU of the runtime behind backend.Default's
// "ascend", opened. The first call loads CANN if the registry has not yet,
// and the registry shares that load: CANN is loaded once per process. If
// it fails, DefaultDevice returns the error, now and on every later call,
// and it is the reason backend.Default gives for "ascend" being
// unavailable. If the NPU cannot be opened, it returns that error and the
// next call tries again.
func DefaultDevice() (*Device, error) {
	rt, err := loadDefault()
	if err != nil {
		return nil, err
	}
	d := rt.Device()
	if err := d.Open(); err != nil {
		return nil, err
	}
	return d, nil
}
