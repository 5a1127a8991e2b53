package dispatch

import (
	"slices"
	"testing"
)

type kernels struct{ lanes int }

func TestSet(t *testing.T) {
	a, b := &kernels{16}, &kernels{8}
	s := New(Impl[kernels]{"avx512", a}, Impl[kernels]{"avx2", b})
	if got := s.Names(); !slices.Equal(got, []string{"avx512", "avx2", GoName}) {
		t.Fatalf("Names() = %v", got)
	}
	if s.Active() != a {
		t.Fatal("the best implementation is not active by default")
	}
	if n := len(s.SIMD()); n != 2 {
		t.Fatalf("len(SIMD()) = %d, want 2", n)
	}
	restore := s.Use(GoName)
	if s.Active() != nil {
		t.Fatal("the pure-Go implementation has kernels")
	}
	inner := s.Use("avx2")
	if s.Active() != b {
		t.Fatal("Use(avx2) did not select it")
	}
	inner()
	if s.Active() != nil {
		t.Fatal("restore did not return to the previous selection")
	}
	restore()
	if s.Active() != a {
		t.Fatal("restore did not return to the default")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Use of an unknown name did not panic")
			}
		}()
		s.Use("sse")
	}()
	if g := New[kernels](); !slices.Equal(g.Names(), []string{GoName}) || g.Active() != nil || len(g.SIMD()) != 0 {
		t.Fatalf("empty set: names %v", g.Names())
	}
}
