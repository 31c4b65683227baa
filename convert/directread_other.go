//go:build !linux

package convert

import (
	"errors"

	"github.com/gokitchen/kitchen/safetensors"
)

// errNoDirect says that kitchen reads with O_DIRECT on Linux only (and
// through the mapping elsewhere).
var errNoDirect = errors.New("direct reads are not supported on this system")

func openDirect(*safetensors.File) (directFile, error) { return nil, errNoDirect }

func mapRing(int, int) ([]byte, func(), error) { return nil, nil, errNoDirect }
