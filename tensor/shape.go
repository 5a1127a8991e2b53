package tensor

import (
	"fmt"
	"math"
)

// Shape lists a tensor's dimensions, outermost first. A scalar has an empty shape.
type Shape []int

// NumElements is the product of the dimensions (1 for a scalar), or -1 when a dimension is
// negative or the product overflows int (see CheckSize).
func (s Shape) NumElements() int {
	n, err := CheckSize("", "", s...)
	if err != nil {
		return -1
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

// CheckSize returns the product of dims, or an ErrShape error naming op and arg when a
// dimension is negative or the product of the non-zero dimensions overflows int (so no stride
// of an empty shape overflows either). It is the one overflow-safe size computation of the
// module: tensor constructors, Reshape, storage byte counts, and the image and patch-grid
// sizes of package perturb all go through it, so no size wraps around.
func CheckSize(op, arg string, dims ...int) (int, error) {
	p, empty := 1, false
	for i, d := range dims {
		switch {
		case d < 0:
			return 0, Errorf(ErrShape, op, arg, "dimension %d of %v is negative", i, dims)
		case d == 0:
			empty = true
		case p > math.MaxInt/d:
			return 0, Errorf(ErrShape, op, arg, "%v has more elements than an int can count", dims)
		default:
			p *= d
		}
	}
	if empty {
		return 0, nil
	}
	return p, nil
}
