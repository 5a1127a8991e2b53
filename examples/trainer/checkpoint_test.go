package main

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSafetensorsRoundTrip(t *testing.T) {
	in := []NamedTensor{
		{Name: "b", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, float32(math.Inf(-1))}},
		{Name: "a", Shape: []int{1}, Data: []float32{-0.5}},
		{Name: "s", Shape: []int{}, Data: []float32{7}},
	}
	data, err := EncodeSafetensors(in, map[string]string{"k": "v"})
	require.NoError(t, err)
	hl := binary.LittleEndian.Uint64(data)
	assert.Zero(t, (8+hl)%8, "data is 8-byte aligned")
	assert.Contains(t, string(data[8:8+hl]), `"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}`)
	out, err := DecodeSafetensors(data, "x")
	require.NoError(t, err)
	require.Len(t, out, 3)
	for _, nt := range in {
		assert.Equal(t, nt.Data, out[nt.Name].Data)
		assert.Equal(t, len(nt.Shape), len(out[nt.Name].Shape))
	}
	again, _ := EncodeSafetensors(in, map[string]string{"k": "v"})
	assert.Equal(t, data, again, "deterministic bytes")

	_, err = EncodeSafetensors([]NamedTensor{{Name: "x", Shape: []int{2}, Data: []float32{1}}}, nil)
	assert.Error(t, err)
	_, err = EncodeSafetensors([]NamedTensor{{Name: "x", Shape: []int{1}, Data: []float32{1}}, {Name: "x", Shape: []int{1}, Data: []float32{1}}}, nil)
	assert.Error(t, err)
}

func TestSafetensorsCorrupt(t *testing.T) {
	good, err := EncodeSafetensors([]NamedTensor{{Name: "w", Shape: []int{4}, Data: []float32{1, 2, 3, 4}}}, nil)
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"short":     good[:5],
		"truncated": good[:len(good)-4],
		"huge hl":   append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, good[8:]...),
		"bad json":  append(append([]byte{}, good[:8]...), []byte("{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{")...),
	} {
		_, err := DecodeSafetensors(data, "file.safetensors")
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "file.safetensors", name)
	}
}

func TestAdamW(t *testing.T) {
	w := []float32{1, -2}
	g := []float32{0.5, 0.5}
	o := NewAdamW([]int{2}, 0.9, 0.999, 1e-8, 0.1)
	require.NoError(t, o.Step([][]float32{w}, [][]float32{g}, []bool{true}, 0.01))
	// First step: m̂ = g, v̂ = g², so the update is lr * sign(g) (+ decay).
	assert.InDelta(t, 1*(1-0.001)-0.01, w[0], 1e-6)
	assert.InDelta(t, -2*(1-0.001)-0.01, w[1], 1e-6)
	assert.Error(t, o.Step([][]float32{w}, nil, []bool{true}, 0.01))
}

func TestClipGradNorm(t *testing.T) {
	g := [][]float32{{3}, {4}}
	n := ClipGradNorm(g, 1)
	assert.InDelta(t, 5, n, 1e-12)
	assert.InDelta(t, 0.6, g[0][0], 1e-5)
	assert.InDelta(t, 0.8, g[1][0], 1e-5)
	h := [][]float32{{float32(math.NaN())}, {1}}
	assert.True(t, math.IsNaN(ClipGradNorm(h, 1)))
	assert.Equal(t, float32(1), h[1][0], "untouched")
}

func TestMetricsLine(t *testing.T) {
	b := MarshalLine(3, Metrics{"b": 0.1, "a": math.NaN(), "c": 1e-300})
	assert.Equal(t, `{"step":3,"a":null,"b":0.1,"c":1e-300}`+"\n", string(b))
	lines, err := parseMetrics(b, "m")
	require.NoError(t, err)
	require.Len(t, lines, 1)
	assert.Nil(t, lines[0].Metrics["a"])
	assert.Equal(t, 0.1, *lines[0].Metrics["b"])
}
