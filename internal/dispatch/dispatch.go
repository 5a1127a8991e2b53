// Package dispatch is the registry of a package's SIMD kernel implementations: the vector
// kernels this build and CPU can run, best first, then the pure-Go reference, and an atomic
// selector for the one the entry points use.
//
// The pure-Go implementation is always last and always present: it runs on every GOARCH and
// under -tags noasm, it is the reference the SIMD kernels are tested against, and it is what
// a CPU without the needed features falls back to. The selector is 0 (the best one) except
// while a package's own tests or benchmarks switch it to run every implementation.
package dispatch

import (
	"slices"
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// GoName is the name of the pure-Go implementation, the last of every Set.
const GoName = "go"

// Impl is one implementation: Kernels is the package's table of vector kernels, nil for the
// pure-Go reference.
type Impl[K any] struct {
	Name    string
	Kernels *K
}

// Set lists the implementations this build can run on this CPU, best first, with the pure-Go
// one last. It is fixed at start-up; only the selection changes (Use), atomically, so
// concurrent readers of Active are safe.
type Set[K any] struct {
	impls []Impl[K]
	sel   atomic.Int32
}

// New returns the Set of the vector implementations simd (best first, as detected from the
// CPU's features) followed by the pure-Go implementation named GoName.
func New[K any](simd ...Impl[K]) *Set[K] {
	impls := append(slices.Clip(simd), Impl[K]{Name: GoName})
	return &Set[K]{impls: impls}
}

// Active returns the kernels of the selected implementation: nil means the pure-Go loops.
func (s *Set[K]) Active() *K {
	if forcedGo.Load() > 0 {
		return nil
	}
	return s.impls[s.sel.Load()].Kernels
}

// forcedGo counts the ForceGo calls not yet restored.
var forcedGo atomic.Int32

// ForceGo makes every Set of the process run its pure-Go reference until restore is called.
// The device kernels reproduce the pure-Go kernels' arithmetic, not the vector kernels' (whose
// exp and lane sums differ in the last bits), so package cuda's cross-checks compare with it.
func ForceGo() (restore func()) {
	forcedGo.Add(1)
	return func() { forcedGo.Add(-1) }
}

// Impls returns every implementation, best first, the pure-Go one last.
func (s *Set[K]) Impls() []Impl[K] { return slices.Clone(s.impls) }

// SIMD returns the vector implementations only (every one but the pure-Go reference).
func (s *Set[K]) SIMD() []Impl[K] { return slices.Clone(s.impls[:len(s.impls)-1]) }

// Names returns the implementations' names, best first; GoName is last.
func (s *Set[K]) Names() []string {
	names := make([]string, len(s.impls))
	for i, im := range s.impls {
		names[i] = im.Name
	}
	return names
}

// Use selects the named implementation until the returned function restores the previous
// selection. For tests and benchmarks; not safe in parallel tests (the selection is global).
// It panics on a name the Set does not hold.
func (s *Set[K]) Use(name string) (restore func()) {
	for i, im := range s.impls {
		if im.Name == name {
			old := s.sel.Swap(int32(i))
			return func() { s.sel.Store(old) }
		}
	}
	panic("dispatch: unknown implementation " + name)
}

// HasAVX512 reports whether the CPU has AVX-512F, and AVX-512DQ too when dq is set.
func HasAVX512(dq bool) bool { return cpu.X86.HasAVX512F && (!dq || cpu.X86.HasAVX512DQ) }

// HasAVX2 reports whether the CPU has AVX2, and FMA too when fma is set.
func HasAVX2(fma bool) bool { return cpu.X86.HasAVX2 && (!fma || cpu.X86.HasFMA) }
