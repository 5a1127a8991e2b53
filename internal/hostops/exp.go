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
	// The float32 conversions keep each product rounded (no FMA under GOAMD64=v3), so the result
	// is the same on every build and tensor's vector kernels can reproduce it bit for bit.
	kf := float32(x*log2e) + 0.5
	ki := int32(kf)
	if kf < float32(ki) {
		ki--
	}
	k := float32(ki)
	r := float32(x-float32(k*ln2Hi)) - float32(k*ln2Lo)
	// Taylor polynomial of degree 7 in Horner form: truncation error |r|^8/8! < 6e-9 on the
	// reduced range.
	p := 1.0/720 + float32(r*(1.0/5040))
	p = 1.0/120 + float32(r*p)
	p = 1.0/24 + float32(r*p)
	p = 1.0/6 + float32(r*p)
	p = 1.0/2 + float32(r*p)
	p = 1 + float32(r*p)
	p = 1 + float32(r*p)
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

// ExpNonPosTable is ExpNonPos computed differently, for the pure-Go vocabulary-wide loops of
// tensor.LogProbEntropy (about half the instructions). Same range and NaN rule; it stays
// accurate up to 88 and inlines. Worst relative error 1.45e-7 (1.3 ulp) over every float32 in
// [-87.3, 0.34] (ExpNonPos: 1.0e-7); the two can differ in the last bit.
//
// It is table-driven: n = round(u*128/ln2) comes from adding a magic number (the float32 sum is
// rounded to an integer whose bits hold n), exp(u) = 2^(n/128) * exp(r) with
// r = u - n*ln2/128 (Cody-Waite hi/lo, |r| <= ln2/256) and exp(r) = 1 + r + r^2/2 (truncation
// error r^3/6 < 4e-9). 2^(n/128) is the table mantissa of 2^((n mod 128)/128) with the exponent
// floor(n/128)+127 shifted in as integer bits: no multiply by 2^k and no int/float conversion.
func ExpNonPosTable(u float32) float32 {
	t := u*(exp2N*log2e) + expMagic
	b := math.Float32bits(t) // low bits: n + 127*128
	n := t - expMagic        // n as a float, exactly
	r := (u - n*ln2NHi) - n*ln2NLo
	scale := math.Float32frombits(exp2Mant[b%exp2N] | (b/exp2N)<<23)
	return scale + scale*(r+r*r*0.5)
}

// Constants of ExpNonPosTable. ln2NHi is ln2/128 to 10 significant bits, so n*ln2NHi is exact for
// |n| < 2^14 (u > -88.7).
const (
	exp2N    = 128
	expMagic = 1.5*(1<<23) + 127*exp2N // rounds to integers; 127*128 puts the exponent bias in b/128
	ln2NHi   = 0.0054092407226562500   // float32 bits 0x3bb14000
	ln2NLo   = 5.9716253e-06
)

// exp2Mant holds the mantissa bits of float32(2^(j/128)) (values in [1, 2)).
var exp2Mant = [128]uint32{
	0x000000, 0x00b1ed, 0x0164d2, 0x0218af, 0x02cd87, 0x038359, 0x043a29, 0x04f1f6,
	0x05aac3, 0x066491, 0x071f62, 0x07db35, 0x08980f, 0x0955ee, 0x0a14d5, 0x0ad4c6,
	0x0b95c2, 0x0c57ca, 0x0d1adf, 0x0ddf04, 0x0ea43a, 0x0f6a81, 0x1031dc, 0x10fa4d,
	0x11c3d3, 0x128e72, 0x135a2b, 0x1426ff, 0x14f4f0, 0x15c3ff, 0x16942d, 0x17657d,
	0x1837f0, 0x190b88, 0x19e046, 0x1ab62b, 0x1b8d3a, 0x1c6573, 0x1d3eda, 0x1e196e,
	0x1ef532, 0x1fd228, 0x20b051, 0x218faf, 0x227043, 0x23520f, 0x243516, 0x251958,
	0x25fed7, 0x26e595, 0x27cd94, 0x28b6d5, 0x29a15b, 0x2a8d26, 0x2b7a3a, 0x2c6897,
	0x2d583f, 0x2e4934, 0x2f3b79, 0x302f0e, 0x3123f6, 0x321a32, 0x3311c4, 0x340aaf,
	0x3504f3, 0x360094, 0x36fd92, 0x37fbf0, 0x38fbaf, 0x39fcd2, 0x3aff5b, 0x3c034a,
	0x3d08a4, 0x3e0f68, 0x3f179a, 0x40213b, 0x412c4d, 0x4238d2, 0x4346cd, 0x44563f,
	0x45672a, 0x467991, 0x478d75, 0x48a2d8, 0x49b9be, 0x4ad226, 0x4bec15, 0x4d078c,
	0x4e248c, 0x4f4319, 0x506334, 0x5184df, 0x52a81e, 0x53ccf1, 0x54f35b, 0x561b5e,
	0x5744fd, 0x587039, 0x599d16, 0x5acb94, 0x5bfbb8, 0x5d2d82, 0x5e60f5, 0x5f9613,
	0x60ccdf, 0x62055b, 0x633f89, 0x647b6d, 0x65b907, 0x66f85b, 0x68396a, 0x697c38,
	0x6ac0c7, 0x6c0719, 0x6d4f30, 0x6e9910, 0x6fe4ba, 0x713231, 0x728177, 0x73d290,
	0x75257d, 0x767a41, 0x77d0df, 0x79295a, 0x7a83b3, 0x7bdfed, 0x7d3e0c, 0x7e9e11,
}
