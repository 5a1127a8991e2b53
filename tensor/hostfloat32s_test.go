package tensor_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/hostile"
	"github.com/mtrl-go/mtrl/tensor"
)

// TestHostFloat32s: a float32 host tensor's own elements (a write shows in the tensor), a device
// tensor's as a downloaded copy, bfloat16 widened, errors for other dtypes.
func TestHostFloat32s(t *testing.T) {
	h := tensor.Must(tensor.FromFloat32([]float32{1, 2, 3}, 3))
	v, err := tensor.HostFloat32s(h)
	require.NoError(t, err)
	v[0] = 7
	own, _ := h.Float32s()
	require.Equal(t, []float32{7, 2, 3}, own, "a host tensor's elements are its own")

	d, err := tensor.To(hostile.Device(), h)
	require.NoError(t, err)
	require.False(t, d.IsHost())
	v, err = tensor.HostFloat32s(d)
	require.NoError(t, err)
	require.Equal(t, []float32{7, 2, 3}, v)
	v[1] = 9
	again, err := tensor.HostFloat32s(d)
	require.NoError(t, err)
	require.Equal(t, []float32{7, 2, 3}, again, "a device tensor's elements are a copy")

	bf := tensor.Must(tensor.FromBF16([]tensor.BF16{tensor.BF16FromFloat32(1.5), tensor.BF16FromFloat32(-3)}, 2))
	for _, x := range []*tensor.Tensor{bf, tensor.Must(tensor.To(hostile.Device(), bf))} {
		v, err := tensor.HostFloat32s(x)
		require.NoError(t, err)
		require.Equal(t, []float32{1.5, -3}, v)
	}

	for name, x := range map[string]*tensor.Tensor{
		"nil":   nil,
		"int32": tensor.Must(tensor.FromInt32([]int32{1}, 1)),
	} {
		_, err := tensor.HostFloat32s(x)
		require.Error(t, err, name)
		var te *tensor.Error
		require.True(t, errors.As(err, &te), "%s: %v", name, err)
	}
}
