//go:build !unix

package safetensors

import "errors"

func mkfifo(string) error { return errors.New("not on this platform") }
