//go:build noascend

package main

import (
	"fmt"

	"github.com/gokitchen/kitchen/tensor"
)

// benchDevice returns the device `kitchen bench --device` names; this build
// has no accelerator backends.
func benchDevice(name string) (tensor.Device, error) {
	if name == "cpu" {
		return tensor.CPU(), nil
	}
	return nil, fmt.Errorf("bench: device %q: this kitchen was built with -tags noascend", name)
}

// finalizeDevices has no device runtime to end in this build.
func finalizeDevices() error { return nil }
