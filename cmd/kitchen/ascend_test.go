//go:build !noascend

package main

// ascendBuilt says whether this build links the Ascend backend (the
// noascend tag leaves it out), which `kitchen backends` then lists.
const ascendBuilt = true
