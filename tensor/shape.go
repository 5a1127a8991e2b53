package tensor

import (
	"fmt"
	"math"
)

// Shape lists a tensor's dimensions, outermost first. A scalar has an empty shape.
type Shape []int

// NumElements is the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether both shapes have the same dimensions.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

func (s Shape) String() string { return fmt.Sprint([]int(s)) }

// checkShape validates dimensions and returns the element count without overflowing.
func checkShape(op string, shape []int) (int, error) {
	n := 1
	for i, d := range shape {
		if d < 0 {
			return 0, Errorf(ErrShape, op, "shape", "dimension %d is negative (%d)", i, d)
		}
		if d != 0 && n > math.MaxInt/d {
			return 0, Errorf(ErrShape, op, "shape", "%v has too many elements", shape)
		}
		n *= d
	}
	return n, nil
}
