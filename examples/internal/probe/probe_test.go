package probe

import (
	"slices"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestHost: a float32 tensor's values come back copied, a bfloat16 one's widened.
func TestHost(t *testing.T) {
	want := []float32{1.5, -2, 0.25}
	x := tensor.Must(tensor.FromFloat32(slices.Clone(want), 3))
	got, err := Host(x)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("float32: %v, %v; want %v", got, err, want)
	}
	got[0] = 9
	if v, _ := x.Float32s(); v[0] != want[0] {
		t.Fatalf("Host returned the tensor's own storage")
	}
	bf := make([]tensor.BF16, len(want))
	for i, v := range want {
		bf[i] = tensor.BF16FromFloat32(v)
	}
	got, err = Host(tensor.Must(tensor.FromBF16(bf, 3)))
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("bfloat16: %v, %v; want %v", got, err, want)
	}
}

// TestShow: Show names the stage (%d filled when i >= 0) and does nothing without a hook.
func TestShow(t *testing.T) {
	x := tensor.Must(tensor.FromFloat32([]float32{1}, 1))
	Show("lm.layer.%d", 3, x) // no hook: nothing to see, no panic
	var names []string
	Stage = func(name string, got *tensor.Tensor) {
		if got != x {
			t.Errorf("%s: another tensor", name)
		}
		names = append(names, name)
	}
	defer func() { Stage = nil }()
	Show("lm.layer.%d", 3, x)
	Show("vision.merger", -1, x)
	if !slices.Equal(names, []string{"lm.layer.3", "vision.merger"}) {
		t.Fatalf("stages %q", names)
	}
}
