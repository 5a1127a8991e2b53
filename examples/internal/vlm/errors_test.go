package vlm

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/require"
)

func TestBadInputs(t *testing.T) {
	c := tinyConfig()
	m, err := New(c, 1)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 1))
	img := randImages(rng, c, 2)
	tok := randTokens(rng, c, 2, 4)
	_, act, err := m.Forward(img, tok)
	require.NoError(t, err)
	other, _ := New(c, 2)
	bad := tensor.Must(tensor.FromInt32([]int32{1, 2, 99, 3}, 1, 4))
	long := randTokens(rng, c, 2, c.MaxLen+1)
	cases := []struct {
		name, op, arg string
		kind          error
		err           error
	}{
		{"config", "Config.Validate", "Heads", tensor.ErrParam, func() error { cc := c; cc.Heads = 3; _, err := New(cc, 1); return err }()},
		{"patch", "Config.Validate", "PatchSize", tensor.ErrParam, func() error { cc := c; cc.PatchSize = 3; return cc.Validate() }()},
		{"zero", "Config.Validate", "Vocab", tensor.ErrParam, func() error { cc := c; cc.Vocab = 0; return cc.Validate() }()},
		{"token id", "Forward", "tokens", tensor.ErrParam, func() error { _, _, err := m.Forward(randImages(rng, c, 1), bad); return err }()},
		{"too long", "Forward", "tokens", tensor.ErrShape, func() error { _, _, err := m.Forward(img, long); return err }()},
		{"image rows", "Forward", "images", tensor.ErrShape, func() error { _, _, err := m.Forward(randImages(rng, c, 3), tok); return err }()},
		{"image dtype", "Forward", "tokens", tensor.ErrDType, func() error { _, _, err := m.Forward(img, img); return err }()},
		{"dlogits shape", "Backward", "dlogits", tensor.ErrShape, m.Backward(act, tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2, 3, c.Vocab)))},
		{"foreign act", "Backward", "act", tensor.ErrParam, other.Backward(act, tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 2, 4, c.Vocab)))},
		{"nil act", "Backward", "act", tensor.ErrParam, m.Backward(nil, nil)},
		{"empty prompt", "Generate", "prompts", tensor.ErrShape, func() error { _, err := m.Generate(img, [][]int32{{}, {1}}, 3, 1, 1, rng); return err }()},
		{"prompt id", "Generate", "prompts", tensor.ErrParam, func() error { _, err := m.Generate(img, [][]int32{{1}, {-1}}, 3, 1, 1, rng); return err }()},
		{"topP", "Generate", "topP", tensor.ErrParam, func() error { _, err := m.Generate(img, [][]int32{{1}, {1}}, 3, 1, 0, rng); return err }()},
		{"temperature", "Generate", "temperature", tensor.ErrParam, func() error { _, err := m.Generate(img, [][]int32{{1}, {1}}, 3, -1, 1, rng); return err }()},
		{"maxNew", "Generate", "maxNew", tensor.ErrParam, func() error { _, err := m.Generate(img, [][]int32{{1}, {1}}, 0, 1, 1, rng); return err }()},
		{"images", "Generate", "images", tensor.ErrShape, func() error { _, err := m.Generate(img, [][]int32{{1}}, 3, 1, 1, rng); return err }()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.err)
			require.True(t, errors.Is(tc.err, tc.kind), "%v", tc.err)
			require.True(t, strings.Contains(tc.err.Error(), tc.op) && strings.Contains(tc.err.Error(), tc.arg), "%v", tc.err)
		})
	}
}

// TestPaddingDoesNotChangeEarlierLogits checks the causal mask: appending tokens leaves the
// logits of earlier positions unchanged.
func TestPaddingDoesNotChangeEarlierLogits(t *testing.T) {
	c := tinyConfig()
	m, err := New(c, 4)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(2, 2))
	img := randImages(rng, c, 1)
	short, _, err := m.Forward(img, tensor.Must(tensor.FromInt32([]int32{BOS, 5, 6}, 1, 3)))
	require.NoError(t, err)
	long, _, err := m.Forward(img, tensor.Must(tensor.FromInt32([]int32{BOS, 5, 6, PAD, PAD, 9}, 1, 6)))
	require.NoError(t, err)
	s, _ := short.Float32s()
	l, _ := long.Float32s()
	require.InDeltaSlice(t, s, l[:len(s)], 1e-6)
}
