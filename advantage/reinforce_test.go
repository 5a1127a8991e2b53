package advantage

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/internal/hostops"
)

func TestReinforcePlusPlusHandComputed(t *testing.T) {
	// Row 0: valid 0..1, EOS reward at t=1, a stray reward at t=3 after EOS.
	r := t32(t, []float32{0, 1, 0, 2, 1, 1, 1, 1}, 2, 4)
	m := t32(t, []float32{1, 1, 0, 0, 1, 1, 1, 1}, 2, 4)
	adv, ret := zeros(t, 2, 4), zeros(t, 2, 4)
	require.NoError(t, reinforcePlusPlus(adv, ret, r, m, 0.5))
	// Row 0: t=3: 2 (then reset, m=0); t=2: 0 + 0.5*0 = 0 (reset); t=1: 1; t=0: 0.5.
	// Row 1: 1.875, 1.75, 1.5, 1.
	want := []float32{0.5, 1, 0, 2, 1.875, 1.75, 1.5, 1}
	assert.Equal(t, want, data(t, ret))
	white := make([]float32, len(want))
	hostops.MaskedWhiten(white, want, data(t, m))
	assert.Equal(t, white, data(t, adv))
}

func TestReMaxHandComputed(t *testing.T) {
	r := t32(t, []float32{0, 1, 0, 2, 1, 1, 1, 1}, 2, 4)
	m := t32(t, []float32{1, 1, 0, 0, 1, 1, 1, 0}, 2, 4)
	base := t32(t, []float32{0.5, 5}, 2)
	adv, ret := zeros(t, 2, 4), zeros(t, 2, 4)
	require.NoError(t, reMax(adv, ret, r, m, base))
	// Scores over all positions: 3 and 4.
	assert.Equal(t, []float32{2.5, 2.5, 0, 0, -1, -1, -1, 0}, data(t, adv))
	assert.Equal(t, []float32{1, 1, 0, 0, 3, 2, 1, 0}, data(t, ret))
}
