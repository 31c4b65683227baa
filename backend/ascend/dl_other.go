//go:build !(linux && (amd64 || arm64))

package ascend

import "runtime"

// openLibraries fails: CANN ships for Linux on amd64 and arm64 only.
func openLibraries(a *api, dirs []string, system bool) (paths [numLibs]string, acl uintptr, err error) {
	return paths, 0, &LibraryError{Library: libNames[libACL],
		Tried: []string{"CANN runs on linux/amd64 and linux/arm64, not " + runtime.GOOS + "/" + runtime.GOARCH}}
}
