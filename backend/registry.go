// Package backend is kitchen's backend registry: operations declared once
// with typed arguments (Declare), the constraints a backend declares for
// each operation it implements, and the dispatch that picks, before calling,
// the first backend in priority order whose constraints hold.
//
// Each operation has its own Args type, declared with the operation in
// package op, so a kernel receives its operation's parameters by name and
// type. The registry stays generic through a small interface (Args) that
// exposes parameters by name for constraint checks and refusals: a new
// operation needs no change here.
//
// Backends import this package and register themselves (usually from init,
// with Register on the Default registry, or lazily with RegisterLazy for
// backends that must load a runtime first); users normally reach it
// through the top-level kitchen package.
package backend

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Kind orders backends by default: accelerators first, then the fused host
// backend, then the reference.
type Kind uint8

// The kinds, in default priority order.
const (
	Accelerator Kind = iota
	Host
	Reference
)

var kindNames = [...]string{Accelerator: "accelerator", Host: "host", Reference: "reference"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Capability is one operation a backend implements: what it accepts and
// the kernel that runs it. Make one with Op.Implement.
type Capability struct {
	// Op is the operation's name.
	Op          string
	Constraints Constraints
	run         any // the Kernel[A, R] of the operation's types
}

// Backend is a named set of capabilities.
type Backend struct {
	Name string
	Kind Kind
	Caps []Capability
}

type entry struct {
	Backend
	ops         map[string]Capability
	seq         int // registration order, the tie-break within a Kind
	disabled    bool
	unavailable string
	lazy        *lazy // not yet loaded
}

// lazy is a backend that loads on first need.
type lazy struct {
	once    sync.Once
	devices []string
	load    func() (Backend, error)
}

// selected is the capability the registry chose, with its backend's name.
type selected struct {
	backend string
	run     any
}

// Registry holds backends and dispatches calls to them. It is safe for
// concurrent use. The zero value is not usable; use NewRegistry.
type Registry struct {
	mu       sync.RWMutex
	backends map[string]*entry
	priority []string // explicit order; backends not in it follow by default order
	sorted   []*entry // backends in priority order, rebuilt on every change
	logger   *slog.Logger
	seq      int
}

// NewRegistry returns an empty registry that logs dispatch decisions at
// debug level to logger (slog.Default() when nil).
func NewRegistry(logger *slog.Logger) *Registry {
	return &Registry{backends: map[string]*entry{}, logger: logger}
}

// Default is the registry that built-in backends register with and that the
// kitchen package dispatches through.
var Default = NewRegistry(nil)

// Register adds a backend with the given capabilities. It replaces an entry
// of the same name that was only marked unavailable, keeping its enabled
// state; registering a name twice otherwise is an error.
func (r *Registry) Register(b Backend) error {
	if b.Name == "" {
		return fmt.Errorf("backend: register: empty name")
	}
	if int(b.Kind) >= len(kindNames) {
		return fmt.Errorf("backend: register %q: unknown kind %v", b.Name, b.Kind)
	}
	ops := make(map[string]Capability, len(b.Caps))
	for _, c := range b.Caps {
		if c.run == nil {
			return fmt.Errorf("backend: register %q: %s has no kernel", b.Name, c.Op)
		}
		if _, dup := ops[c.Op]; dup {
			return fmt.Errorf("backend: register %q: %s listed twice", b.Name, c.Op)
		}
		ops[c.Op] = c
	}
	b.Caps = slices.Clone(b.Caps) // later changes by the caller must not race with dispatch
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.backends[b.Name]
	if old != nil && old.unavailable == "" && old.lazy == nil {
		return fmt.Errorf("backend: %q registered twice", b.Name)
	}
	e := &entry{Backend: b, ops: ops, seq: r.seq}
	if old != nil {
		e.disabled, e.seq = old.disabled, old.seq
	}
	r.seq++
	r.backends[b.Name] = e
	r.sort()
	return nil
}

// MarkUnavailable records that a backend cannot run here and why (a library
// that did not load, no device). ListBackends shows the reason, and asking
// for the backend by name returns it in a BackendNotFoundError.
func (r *Registry) MarkUnavailable(name string, kind Kind, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.backends[name]
	if e == nil {
		e = &entry{Backend: Backend{Name: name, Kind: kind}, seq: r.seq}
		r.seq++
		r.backends[name] = e
		r.sort()
	}
	e.unavailable, e.lazy = reason, nil
}

// RegisterLazy adds a backend that is loaded the first time the registry
// needs to know whether it can run: a dispatch of a call on one of the
// given device types, a call that names it, or ListBackends. Until then it
// costs nothing; load runs once, and its error marks the backend
// unavailable with the error's text as the reason. A backend that must load
// a runtime (dlopen, initialise a driver) registers this way, so that
// importing it does no work at start-up.
func (r *Registry) RegisterLazy(name string, kind Kind, devices []string, load func() (Backend, error)) error {
	if name == "" {
		return fmt.Errorf("backend: register: empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.backends[name] != nil {
		return fmt.Errorf("backend: %q registered twice", name)
	}
	r.backends[name] = &entry{Backend: Backend{Name: name, Kind: kind}, seq: r.seq,
		lazy: &lazy{devices: slices.Clone(devices), load: load}}
	r.seq++
	r.sort()
	return nil
}

// resolve loads the lazy backends for which need holds, outside the lock
// (loading may be slow, and a logger or the loader may use the registry).
func (r *Registry) resolve(need func(e *entry) bool) {
	type pending struct {
		e *entry
		l *lazy
	}
	r.mu.RLock()
	var todo []pending
	for _, e := range r.sorted {
		if e.lazy != nil && need(e) {
			todo = append(todo, pending{e, e.lazy})
		}
	}
	r.mu.RUnlock()
	for _, p := range todo {
		p.l.once.Do(func() {
			b, err := p.l.load()
			if err == nil && b.Name != p.e.Name {
				err = fmt.Errorf("loaded a backend named %q", b.Name)
			}
			if err == nil {
				err = r.Register(b)
			}
			if err != nil {
				r.mu.Lock()
				p.e.lazy, p.e.unavailable = nil, err.Error()
				r.mu.Unlock()
			}
		})
	}
}

// SetEnabled enables or disables a backend for automatic and explicit
// selection.
func (r *Registry) SetEnabled(name string, enabled bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.backends[name]
	if e == nil {
		return &BackendNotFoundError{Name: name, Reason: "no backend of that name is registered"}
	}
	e.disabled = !enabled
	return nil
}

// SetPriority sets the order in which backends are tried. Backends not
// named keep their default order after the named ones; no names restores
// the default (accelerators, host, reference; then registration order).
func (r *Registry) SetPriority(names ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if r.backends[n] == nil {
			return &BackendNotFoundError{Name: n, Reason: "no backend of that name is registered"}
		}
	}
	r.priority = slices.Clone(names)
	r.sort()
	return nil
}

// sort rebuilds r.sorted. The caller holds r.mu for writing.
func (r *Registry) sort() {
	rank := map[string]int{}
	for i, n := range r.priority {
		rank[n] = i
	}
	es := make([]*entry, 0, len(r.backends))
	for _, e := range r.backends {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int {
		ra, aok := rank[a.Name]
		rb, bok := rank[b.Name]
		switch {
		case aok && bok:
			return cmp.Compare(ra, rb)
		case aok:
			return -1
		case bok:
			return 1
		}
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.seq, b.seq))
	})
	r.sorted = es
}

// Info describes one backend for ListBackends.
type Info struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Available bool   `json:"available"`
	Disabled  bool   `json:"disabled"`
	// Reason says why the backend is unavailable.
	Reason string `json:"unavailable_reason,omitempty"`
	// Capabilities lists, per operation, the constraints in words.
	Capabilities map[string][]string `json:"capabilities"`
}

// ListBackends describes every known backend in priority order, loading
// lazy ones first so that their availability is known.
func (r *Registry) ListBackends() []Info {
	r.resolve(func(*entry) bool { return true })
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Info
	for _, e := range r.sorted {
		info := Info{
			Name: e.Name, Kind: e.Kind.String(), Available: e.unavailable == "",
			Disabled: e.disabled, Reason: e.unavailable, Capabilities: map[string][]string{},
		}
		for _, c := range e.Caps {
			info.Capabilities[c.Op] = c.Constraints.Describe()
		}
		out = append(out, info)
	}
	return out
}

// log is the logger the registry's debug messages go to: the one given to
// NewRegistry, else slog.Default() as it is at the time of the call.
func (r *Registry) log() *slog.Logger {
	if r.logger != nil {
		return r.logger
	}
	return slog.Default()
}

// pick validates a call of the named operation and returns the backend
// that will run it: the one named, or else the first in priority order
// whose constraints hold.
func (r *Registry) pick(ctx context.Context, op string, args Args, name string) (selected, error) {
	if err := args.Validate(); err != nil {
		return selected{}, err
	}
	dev := args.Device()
	r.resolve(func(e *entry) bool {
		return e.Name == name || (name == "" && !e.disabled && slices.Contains(e.lazy.devices, dev.Type()))
	})
	chosen, declines, err := r.choose(op, args, name)
	// Log after the lock is released: a handler may call back into the
	// registry.
	log := r.log()
	if log.Enabled(ctx, slog.LevelDebug) {
		how := "explicit"
		if name == "" {
			how = "auto"
		}
		if err != nil {
			log.DebugContext(ctx, "kitchen dispatch", "op", op, "device", dev.String(), "error", err)
		} else {
			log.DebugContext(ctx, "kitchen dispatch", "op", op, "device", dev.String(), "backend", chosen.backend, "chosen", how, "declined", declines)
		}
	}
	return chosen, err
}

// choose picks the backend for a validated call under the read lock.
func (r *Registry) choose(op string, args Args, name string) (selected, []Decline, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	dev := args.Device().String()
	if name != "" {
		e := r.backends[name]
		switch {
		case e == nil:
			return selected{}, nil, &BackendNotFoundError{Name: name, Reason: "no backend of that name is registered"}
		case e.unavailable != "":
			return selected{}, nil, &BackendNotFoundError{Name: name, Reason: "unavailable: " + e.unavailable}
		case e.disabled:
			return selected{}, nil, &BackendNotFoundError{Name: name, Reason: "disabled"}
		}
		cp, ok := e.ops[op]
		if !ok {
			return selected{}, nil, &NotImplementedError{Backend: name, Op: op}
		}
		if d := cp.Constraints.Check(args); d != nil {
			d.Backend = name
			return selected{}, nil, &NoCapableBackendError{Op: op, Device: dev, Declines: []Decline{*d}}
		}
		return selected{name, cp.run}, nil, nil
	}
	var declines []Decline
	for _, e := range r.sorted {
		var d *Decline
		cp, ok := e.ops[op]
		switch {
		case e.unavailable != "":
			d = &Decline{Reason: "unavailable: " + e.unavailable}
		case e.disabled:
			d = &Decline{Reason: "disabled"}
		case e.lazy != nil: // not loaded: its devices are not this call's
			d = &Decline{Param: "device", Reason: fmt.Sprintf("%v not in [%s]", dev, strings.Join(e.lazy.devices, ", "))}
		case !ok:
			d = &Decline{Reason: "does not implement " + op}
		default:
			d = cp.Constraints.Check(args)
		}
		if d == nil {
			return selected{e.Name, cp.run}, declines, nil
		}
		d.Backend = e.Name
		declines = append(declines, *d)
	}
	return selected{}, declines, &NoCapableBackendError{Op: op, Device: dev, Declines: declines}
}

// Register adds a backend to the Default registry, panicking on error:
// it is meant for init functions, where a failure is a programming error.
func Register(b Backend) {
	if err := Default.Register(b); err != nil {
		panic(err)
	}
}
