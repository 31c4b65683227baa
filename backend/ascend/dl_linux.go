//go:build linux && (amd64 || arm64)

package ascend

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ebitengine/purego"
)

// openLibraries loads the three libraries, each from the first of dirs that
// holds it, or, when system is set and none does, through the dynamic
// loader's own search (LD_LIBRARY_PATH as the process started, the ld.so
// cache). It binds every function of a and returns where each library came
// from and libascendcl.so's handle, which is the same for every load of one
// library object.
func openLibraries(a *api, dirs []string, system bool) (paths [numLibs]string, acl uintptr, err error) {
	var handles [numLibs]uintptr
	defer func() {
		if err != nil {
			for _, h := range handles {
				if h != 0 {
					purego.Dlclose(h)
				}
			}
		}
	}()
	for lib, name := range libNames {
		var tried []string
		for _, dir := range dirs {
			path := filepath.Join(dir, name)
			if _, serr := os.Stat(path); serr != nil {
				why := serr.Error()
				if errors.Is(serr, fs.ErrNotExist) {
					why = "no such file"
				}
				tried = append(tried, path+": "+why)
				continue
			}
			h, derr := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if derr != nil {
				tried = append(tried, path+": "+derr.Error())
				continue
			}
			handles[lib], paths[lib] = h, path
			break
		}
		if handles[lib] == 0 && system {
			h, derr := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if derr != nil {
				tried = append(tried, name+" through the dynamic loader: "+derr.Error())
			} else {
				handles[lib], paths[lib] = h, name
			}
		}
		if handles[lib] == 0 {
			if len(tried) == 0 {
				tried = []string{"no directories to search"}
			}
			return paths, 0, &LibraryError{Library: name, Tried: tried}
		}
	}
	// Each function is looked up in the library that declares it first, then
	// in the others, so a CANN release that moves a function between its
	// libraries still works.
	for _, s := range a.symbols() {
		var addr uintptr
		for i := range numLibs {
			lib := (s.lib + i) % numLibs
			if p, derr := purego.Dlsym(handles[lib], s.name); derr == nil && p != 0 {
				addr = p
				break
			}
		}
		if addr == 0 {
			return paths, 0, &LibraryError{Library: libNames[s.lib], Tried: []string{paths[s.lib]}, Symbol: s.name}
		}
		purego.RegisterFunc(s.fn, addr)
	}
	return paths, handles[libACL], nil
}
