//go:build !noascend

package main

import (
	"fmt"

	"github.com/gokitchen/kitchen/backend/ascend"
	"github.com/gokitchen/kitchen/tensor"
)

// benchDevice returns the device `kitchen bench --device` names.
func benchDevice(name string) (tensor.Device, error) {
	switch name {
	case "cpu":
		return tensor.CPU(), nil
	case ascend.DeviceType:
		dev, err := ascend.DefaultDevice()
		if err != nil {
			return nil, fmt.Errorf("bench: device %s: %w", name, err)
		}
		return dev, nil
	}
	return nil, fmt.Errorf("bench: unknown device %q (want cpu or npu)", name)
}

// finalizeDevices ends AscendCL (ascend.Finalize) after the command's last
// NPU operation.
func finalizeDevices() error { return ascend.Finalize() }
