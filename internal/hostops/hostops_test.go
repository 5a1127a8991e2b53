package hostops

import (
	"math"
	"testing"
)

func TestExp32Accuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-87.3); x < 88.7; x += 0.00731 {
		got := float64(Exp32(x))
		want := math.Exp(float64(x))
		rel := math.Abs(got-want) / want
		worst = max(worst, rel)
	}
	// 2 ulp of float32 is about 2.4e-7 relative.
	if worst > 2.4e-7 {
		t.Fatalf("worst relative error %.3g", worst)
	}
	for _, c := range []struct{ x, want float32 }{{-100, 0}, {0, 1}, {float32(math.Inf(-1)), 0}} {
		if got := Exp32(c.x); got != c.want {
			t.Errorf("Exp32(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if !math.IsInf(float64(Exp32(89)), 1) || !math.IsNaN(float64(Exp32(float32(math.NaN())))) {
		t.Error("overflow or NaN not propagated")
	}
}

func TestTopPCountFloat32Rule(t *testing.T) {
	// See docs/semantics.md#float32-evaluation-order: float32 products differ from float64 ones
	// here.
	for _, c := range []struct {
		n    int
		p    float32
		want int
	}{{50, 0.3, 16}, {25, 0.6, 16}, {45, 0.6, 28}, {50, 0.6, 31}, {0, 0.5, 0}, {7, 1, 7}, {7, 0, 0}} {
		if got := TopPCount(c.n, c.p); got != c.want {
			t.Errorf("TopPCount(%d, %v) = %d, want %d", c.n, c.p, got, c.want)
		}
	}
}

func TestExpGeneric(t *testing.T) {
	if !isFloat32[float32]() || isFloat32[float64]() {
		t.Fatal("isFloat32 misidentifies the precision")
	}
	if got := Exp(1.0); got != math.E {
		t.Errorf("Exp[float64](1) = %v", got)
	}
}

func TestExpNonPosAccuracy(t *testing.T) {
	for _, c := range []struct {
		name  string
		f     func(float32) float32
		bound float64 // worst over every float32 in [-87.3, 0.34]: 1.02e-7 and 1.45e-7
	}{{"ExpNonPos", ExpNonPos, 1.1e-7}, {"ExpNonPosTable", ExpNonPosTable, 1.5e-7}} {
		worst := 0.0
		check := func(x float32) {
			got := float64(c.f(x))
			want := math.Exp(float64(x))
			worst = max(worst, math.Abs(got-want)/want)
		}
		for x := float32(-87.3); x < 0.34; x += 0.000731 {
			check(x)
		}
		for i := uint32(0); i < 1<<20; i++ { // every float32 exponent and tiny arguments
			check(-math.Float32frombits(i * 1063))
		}
		if worst > c.bound {
			t.Errorf("%s: worst relative error %.3g", c.name, worst)
		}
		if c.f(0) != 1 || !math.IsNaN(float64(c.f(float32(math.NaN())))) {
			t.Errorf("%s: exp(0) != 1 or NaN not propagated", c.name)
		}
	}
	worst := 0.0
	for x := float32(0.34); x < 88.7; x += 0.00731 { // the table version beyond the contract
		want := math.Exp(float64(x))
		worst = max(worst, math.Abs(float64(ExpNonPosTable(x))-want)/want)
	}
	if worst > 1.5e-7 {
		t.Errorf("ExpNonPosTable: worst relative error %.3g on [0.34, 88.7]", worst)
	}
	for j, m := range exp2Mant {
		if want := math.Float32bits(float32(math.Exp2(float64(j) / exp2N))); m|127<<23 != want {
			t.Errorf("exp2Mant[%d] = %#x, want %#x", j, m, want&(1<<23-1))
		}
	}
}
