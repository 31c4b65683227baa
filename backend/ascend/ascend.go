// Package ascend is kitchen's backend for Huawei Ascend NPUs: the device
// type "npu", whose tensors live in NPU memory and whose primitives are
// aclnn operators, so the eager backend runs on the NPU unchanged, and the
// backend "ascend", with fused kernels for the INT8 operations.
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
}

// Load loads the CANN libraries, initializes AscendCL and checks that the
// NPU exists. It fails with a *LibraryError when a library cannot be
// loaded, an *Error when a call fails, or an error wrapping ErrNoDevice
// when there is no such NPU. The NPU itself is opened by Device.Open or
// the first operation on it.
//
// AscendCL can be initialized once per process, so a second Load shares
// the first one's initialization; Runtime.Close never finalizes it.
func Load(opts Options) (*Runtime, error) {
	dirs, system := opts.Dirs, false
	if dirs == nil {
		dirs, system = DefaultDirs(), os.Getenv(EnvLibDir) == ""
	}
	r := &Runtime{}
	paths, err := openLibraries(&r.api, dirs, system)
	if err != nil {
		return nil, err
	}
	r.paths = paths
	a := &r.api

	// The runtime's current context is per OS thread: stay on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if st := a.aclInit(nil); st != 0 && st != aclErrorRepeatInit {
		return nil, r.fail("aclInit", st)
	}
	a.aclGetRecentErrMsg() // forget the message of a repeated initialization
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
// Tensors on the device can still be released; nothing else runs on it.
// If waiting or destroying fails, the device stays open and Close can be
// called again.
func (r *Runtime) Close() error {
	d := r.dev
	d.mu.Lock()
	defer d.unlock()
	if d.closed {
		return nil
	}
	if !d.opened {
		d.closed = true
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if st := r.api.aclrtSetCurrentContext(d.ctx); st != 0 {
		return r.fail("aclrtSetCurrentContext", st)
	}
	d.freeLostLocked()
	if st := r.api.aclrtSynchronizeStream(d.stream); st != 0 {
		return r.fail("aclrtSynchronizeStream", st)
	}
	if st := r.api.aclrtDestroyStream(d.stream); st != 0 {
		return r.fail("aclrtDestroyStream", st)
	}
	d.closed = true
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
	loaded.once.Do(func() { loaded.rt, loaded.err = Load(Options{}) })
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
