package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gokitchen/kitchen/backend"
)

// runCLI runs the command line in-process and returns stdout and the error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestBackendsJSON(t *testing.T) {
	out, err := runCLI(t, "backends", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var infos []backend.Info
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	found := false
	for _, b := range infos {
		if b.Name == "eager" {
			found = b.Available && len(b.Capabilities) == len(backend.Ops)
		}
	}
	if !found {
		t.Errorf("eager missing or incomplete in %s", out)
	}
}

func TestBackendsTable(t *testing.T) {
	out, err := runCLI(t, "backends")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BACKEND", "eager", "reference", "available", string(backend.DequantizeDType)} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	if err != nil || !strings.HasPrefix(out, "kitchen ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %q %v", out, err)
	}
	if _, err := runCLI(t, "version", "extra"); err == nil {
		t.Error("version accepted an argument")
	}
}
