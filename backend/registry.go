package backend

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
// the kernel that runs it.
type Capability struct {
	Constraints Constraints
	Run         Kernel
}

// Backend is a named set of capabilities.
type Backend struct {
	Name string
	Kind Kind
	Ops  map[Op]Capability
}

type entry struct {
	Backend
	seq         int // registration order, the tie-break within a Kind
	disabled    bool
	unavailable string
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
	b.Ops = maps.Clone(b.Ops) // later changes by the caller must not race with dispatch
	for op, c := range b.Ops {
		if c.Run == nil {
			return fmt.Errorf("backend: register %q: %s has no kernel", b.Name, op)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.backends[b.Name]
	if old != nil && old.unavailable == "" {
		return fmt.Errorf("backend: %q registered twice", b.Name)
	}
	e := &entry{Backend: b, seq: r.seq}
	if old != nil {
		e.disabled = old.disabled
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
	e.unavailable = reason
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
	Capabilities map[Op][]string `json:"capabilities"`
}

// ListBackends describes every known backend in priority order.
func (r *Registry) ListBackends() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Info
	for _, e := range r.sorted {
		info := Info{
			Name: e.Name, Kind: e.Kind.String(), Available: e.unavailable == "",
			Disabled: e.disabled, Reason: e.unavailable, Capabilities: map[Op][]string{},
		}
		for op, c := range e.Ops {
			info.Capabilities[op] = c.Constraints.Describe()
		}
		out = append(out, info)
	}
	return out
}

type ctxKey struct{}

// WithBackend returns a context under which calls without an explicit
// backend use the named one: a scoped override that needs no global state.
func WithBackend(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, ctxKey{}, name)
}

// BackendFromContext returns the backend set by WithBackend, if any.
func BackendFromContext(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(ctxKey{}).(string)
	return name, ok && name != ""
}

// Select validates the call and returns the backend that will run it: the
// one named (explicitly, or by WithBackend on ctx), or else the first in
// priority order whose constraints hold.
func (r *Registry) Select(ctx context.Context, c *Call, name string) (string, Kernel, error) {
	if err := Validate(c); err != nil {
		return "", nil, err
	}
	how := "explicit"
	if name == "" {
		var ok bool
		if name, ok = BackendFromContext(ctx); ok {
			how = "scoped"
		}
	}
	chosen, run, declines, err := r.choose(c, name)
	// Log after the lock is released: a handler may call back into the
	// registry.
	log := r.logger
	if log == nil {
		log = slog.Default()
	}
	if log.Enabled(ctx, slog.LevelDebug) {
		if name == "" {
			how = "auto"
		}
		if err != nil {
			log.DebugContext(ctx, "kitchen dispatch", "op", c.Op, "device", c.Device().String(), "error", err)
		} else {
			log.DebugContext(ctx, "kitchen dispatch", "op", c.Op, "device", c.Device().String(), "backend", chosen, "chosen", how, "declined", declines)
		}
	}
	return chosen, run, err
}

// choose picks the backend for a validated call under the read lock.
func (r *Registry) choose(c *Call, name string) (string, Kernel, []Decline, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if name != "" {
		e := r.backends[name]
		switch {
		case e == nil:
			return "", nil, nil, &BackendNotFoundError{Name: name, Reason: "no backend of that name is registered"}
		case e.unavailable != "":
			return "", nil, nil, &BackendNotFoundError{Name: name, Reason: "unavailable: " + e.unavailable}
		case e.disabled:
			return "", nil, nil, &BackendNotFoundError{Name: name, Reason: "disabled"}
		}
		cp, ok := e.Ops[c.Op]
		if !ok {
			return "", nil, nil, &NotImplementedError{Backend: name, Op: c.Op}
		}
		if d := cp.Constraints.Check(c); d != nil {
			d.Backend = name
			return "", nil, nil, &NoCapableBackendError{Op: c.Op, Device: c.Device().String(), Declines: []Decline{*d}}
		}
		return name, cp.Run, nil, nil
	}
	var declines []Decline
	for _, e := range r.sorted {
		var d *Decline
		cp, ok := e.Ops[c.Op]
		switch {
		case e.unavailable != "":
			d = &Decline{Reason: "unavailable: " + e.unavailable}
		case e.disabled:
			d = &Decline{Reason: "disabled"}
		case !ok:
			d = &Decline{Reason: "does not implement " + string(c.Op)}
		default:
			d = cp.Constraints.Check(c)
		}
		if d == nil {
			return e.Name, cp.Run, declines, nil
		}
		d.Backend = e.Name
		declines = append(declines, *d)
	}
	return "", nil, declines, &NoCapableBackendError{Op: c.Op, Device: c.Device().String(), Declines: declines}
}

// Dispatch selects a backend as Select does and runs the call on it,
// returning the backend's name with the result.
func (r *Registry) Dispatch(ctx context.Context, c *Call, name string) (Result, string, error) {
	chosen, run, err := r.Select(ctx, c, name)
	if err != nil {
		return Result{}, "", err
	}
	res, err := run(ctx, c)
	if err != nil {
		return Result{}, chosen, fmt.Errorf("backend %s: %w", chosen, err)
	}
	return res, chosen, nil
}

// Register adds a backend to the Default registry, panicking on error:
// it is meant for init functions, where a failure is a programming error.
func Register(b Backend) {
	if err := Default.Register(b); err != nil {
		panic(err)
	}
}
