package backendtest

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gokitchen/kitchen/backend"
	"github.com/gokitchen/kitchen/dtype"
	"github.com/gokitchen/kitchen/internal/golden"
)

// cases are the conformance cases of one operation.
//
// To add an operation: in the file of its family (a new one, named after
// it, for a new family), call add from init with the operation's
// declaration (package op) and its cases. Every field must be set: a
// backend that implements an operation is tested on all five parts
// (see the package doc). golden needs vectors: a generator in
// tools/golden/ writes them to a file in testdata/golden/, listed in
// goldenCases.
type cases struct {
	// golden turns a golden vector into a call of the operation and the
	// outputs it must give; ok is false for vectors that are not for it.
	golden func(c *golden.Case) (call Call, want []output, ok bool)
	// random builds a call from generated inputs (see gen). The suite
	// runs it for every float dtype (g.dt: an operation without a float
	// input has nothing to use it for), with g.seed 0 and, when stochastic
	// is set, with a seed > 0, and compares it with the reference.
	random     func(g *gen) Call
	stochastic bool
	// bad lists calls that must fail, each with the parameter, the
	// sentinel and the row it must report.
	bad func(e *env) []badCall
	// paths checks what small random inputs miss (see splitShape), using
	// e.match, e.fails, e.expect and e.same, which count each case in tl.
	paths func(t *testing.T, e *env, tl *tally)
}

// suite holds each operation's cases under its name.
var suite = map[string]*cases{}

// add registers the cases of an operation.
func add(o backend.Operation, cs cases) {
	if cs.golden == nil || cs.random == nil || cs.bad == nil || cs.paths == nil {
		panic("backendtest: incomplete cases for " + o.Name())
	}
	if suite[o.Name()] != nil {
		panic("backendtest: cases for " + o.Name() + " added twice")
	}
	suite[o.Name()] = &cs
}

// opNames lists the operations the suite has cases for, sorted.
func opNames() []string {
	var out []string
	for o := range suite {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// golden runs the golden vectors of op.
func (e *env) golden(t *testing.T, op string, cs *cases) {
	tl := e.tally(op)
	gs := goldenCases(t)
	for i := range gs {
		if c, want, ok := cs.golden(&gs[i]); ok {
			e.expect(t, tl, c, want)
		}
	}
	tl.check(t, "golden")
	t.Logf("%s: %d golden cases", op, tl.ran+tl.declined)
}

var goldenOnce struct {
	sync.Once
	cases []golden.Case
	err   error
}

// goldenCases loads testdata/golden/int8.json, convrot.json and
// linear.json from the module's root,
// found by walking up from the working directory to kitchen's go.mod.
func goldenCases(t testing.TB) []golden.Case {
	goldenOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			goldenOnce.err = err
			return
		}
		for _, f := range []struct {
			name  string
			least int
		}{{"int8.json", 500}, {"convrot.json", 100}, {"linear.json", 100}} {
			cs, err := golden.Load(filepath.Join(root, "testdata", "golden", f.name))
			if err == nil && len(cs) < f.least {
				err = fmt.Errorf("%s: only %d golden cases", f.name, len(cs))
			}
			if err != nil {
				goldenOnce.err = err
				return
			}
			goldenOnce.cases = append(goldenOnce.cases, cs...)
		}
	})
	if goldenOnce.err != nil {
		t.Fatal(goldenOnce.err)
	}
	return goldenOnce.cases
}

const modulePath = "github.com/gokitchen/kitchen"

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module "+modulePath+"\n") {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = up
	}
}

// random runs op's random cases against the reference.
func (e *env) random(t *testing.T, op string, cs *cases) {
	tl := e.tally(op)
	h := fnv.New64a()
	h.Write([]byte(op))
	rng := rand.New(rand.NewPCG(h.Sum64(), 1)) // the same cases on every run
	seeds := []bool{false}
	if cs.stochastic {
		seeds = append(seeds, true)
	}
	for _, dt := range dtype.Floats() {
		for _, stochastic := range seeds {
			for range e.cfg.random {
				g := randomGen(rng, dt, stochastic)
				c := cs.random(g)
				e.match(t, tl, c)
				if t.Failed() {
					return // one case is enough to look at
				}
			}
		}
	}
	tl.check(t, "agree")
}
