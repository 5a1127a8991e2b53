package hostops

import (
	"math"
	"unsafe"
)

// Constants of the exp range reduction x = k*ln2 + r. ln2 is split so k*ln2Hi is exact in
// float32 for |k| < 2^11 (ln2Hi has 9 significant bits).
const (
	log2e = 1.44269504088896341
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	// Below expMin the result is under the smallest normal float32 and we return 0.
	expMin = -87.33654
	// Above expMax the reduction could reach k = 128; those rare inputs take math.Exp.
	expMax = 88.0
)

// Exp32 is a float32 exp accurate to about 2 ulp for normal results. It returns 0 below about
// -87.3 (no subnormals), +Inf where float32 overflows and NaN for NaN. It is several times faster than
// converting to float64 for math.Exp.
func Exp32(x float32) float32 {
	if !(x >= expMin) { // also catches NaN
		if x != x {
			return x
		}
		return 0
	}
	if x > expMax {
		return float32(math.Exp(float64(x)))
	}
	// k = round(x/ln2), r = x - k*ln2 in [-ln2/2, ln2/2].
	kf := x*log2e + 0.5
	ki := int32(kf)
	if kf < float32(ki) {
		ki--
	}
	k := float32(ki)
	r := (x - k*ln2Hi) - k*ln2Lo
	// Taylor polynomial of degree 7: truncation error |r|^8/8! < 6e-9 on the reduced range.
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	return p * math.Float32frombits(uint32(ki+127)<<23)
}

// Float is the element type of kernels written once for float32 (production) and float64
// (finite-difference gradient checks).
type Float interface{ ~float32 | ~float64 }

// Exp is Exp32 for float32 and math.Exp for float64.
func Exp[F Float](x F) F {
	if isFloat32[F]() {
		return F(Exp32(float32(x)))
	}
	return F(math.Exp(float64(x)))
}

// Log is math.Log at the precision of F.
func Log[F Float](x F) F { return F(math.Log(float64(x))) }

func isFloat32[F Float]() bool {
	var z F
	return unsafe.Sizeof(z) == 4
}

// ExpNonPos is exp for arguments in [-87.3, 0.34], the range of a softmax numerator z - max
// (0.34 leaves room for rounding in z - logsumexp). It has no branches so it inlines into the
// vocabulary-wide loops; NaN in gives NaN out. Same accuracy as Exp32.
func ExpNonPos(u float32) float32 {
	ki := -int32(0.5 - u*log2e) // round(u*log2e): the argument is positive, so truncation floors
	k := float32(ki)
	r := (u - k*ln2Hi) - k*ln2Lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	return p * math.Float32frombits(uint32(ki+127)<<23)
}
