package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"sort"
	"testing"
	"unicode/utf8"

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

func TestMetricsLine(t *testing.T) {
	b := MarshalLine(3, Metrics{"b": 0.1, "a": math.NaN(), "c": 1e-300})
	assert.Equal(t, `{"step":3,"a":null,"b":0.1,"c":1e-300}`+"\n", string(b))
	lines, err := parseMetrics(b, "m")
	require.NoError(t, err)
	require.Len(t, lines, 1)
	assert.Nil(t, lines[0].Metrics["a"])
	assert.Equal(t, 0.1, *lines[0].Metrics["b"])
}

// readSafetensorsSpec is an independent reader written from the format's specification
// (huggingface/safetensors README), sharing no code with EncodeSafetensors: it checks what other
// tools rely on — header length, a JSON object padded with spaces so the data starts 8-byte
// aligned, the dtype names, "__metadata__" as a string-to-string map, data_offsets that tile the
// byte buffer in order with no gap — and decodes the little-endian values.
func readSafetensorsSpec(t *testing.T, data []byte) (map[string][]float32, map[string][]int, map[string]string) {
	t.Helper()
	require.GreaterOrEqual(t, len(data), 8)
	n := binary.LittleEndian.Uint64(data[:8])
	require.LessOrEqual(t, 8+n, uint64(len(data)))
	require.Zero(t, (8+n)%8, "data section not 8-byte aligned")
	header := data[8 : 8+n]
	require.True(t, utf8.Valid(header))
	require.Equal(t, byte('{'), header[0], "header must start with '{'")
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(header, &raw))
	var meta map[string]string
	type entry struct {
		name   string
		dtype  string
		shape  []int
		lo, hi int
	}
	var entries []entry
	for k, v := range raw {
		if k == "__metadata__" {
			require.NoError(t, json.Unmarshal(v, &meta), "__metadata__ must map strings to strings")
			continue
		}
		var e struct {
			DType       string `json:"dtype"`
			Shape       []int  `json:"shape"`
			DataOffsets []int  `json:"data_offsets"`
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&e), k)
		require.Contains(t, []string{"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}, e.DType, k)
		require.Len(t, e.DataOffsets, 2, k)
		require.NotNil(t, e.Shape, "%s: shape must be a list ([] for a scalar)", k)
		entries = append(entries, entry{name: k, dtype: e.DType, shape: e.Shape, lo: e.DataOffsets[0], hi: e.DataOffsets[1]})
	}
	// By start, then end: an empty tensor [k, k] precedes one that starts at k.
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		return a.lo < b.lo || (a.lo == b.lo && a.hi < b.hi)
	})
	body := data[8+n:]
	vals, shapes, end := map[string][]float32{}, map[string][]int{}, 0
	for _, e := range entries {
		require.Equal(t, end, e.lo, "%s: gap or overlap in data_offsets", e.name)
		require.Equal(t, "F32", e.dtype, e.name)
		count := 1
		for _, d := range e.shape {
			count *= d
		}
		require.Equal(t, 4*count, e.hi-e.lo, e.name)
		v := make([]float32, count)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[e.lo+4*i:]))
		}
		vals[e.name], shapes[e.name], end = v, e.shape, e.hi
	}
	require.Equal(t, len(body), end, "data section longer than the tensors")
	return vals, shapes, meta
}

// TestSafetensorsReadByIndependentReader writes tensors (a scalar, an empty one, NaN, -0 and
// ±Inf among the values) and reads them back bit for bit with readSafetensorsSpec.
func TestSafetensorsReadByIndependentReader(t *testing.T) {
	nan := math.Float32frombits(0x7fc00123)
	in := []NamedTensor{
		{Name: "layers.0.w", Shape: []int{2, 3}, Data: []float32{1, -2.5, nan, float32(math.Inf(1)), float32(math.Copysign(0, -1)), 3e-38}},
		{Name: "bias", Shape: []int{3}, Data: []float32{0.1, 0.2, 0.3}},
		{Name: "scalar", Shape: []int{}, Data: []float32{42}},
		{Name: "empty", Shape: []int{0, 4}, Data: []float32{}},
	}
	meta := map[string]string{"format": "pt", "step": "12"}
	data, err := EncodeSafetensors(in, meta)
	require.NoError(t, err)
	vals, shapes, gotMeta := readSafetensorsSpec(t, data)
	require.Equal(t, meta, gotMeta)
	require.Len(t, vals, len(in))
	for _, nt := range in {
		require.Equal(t, nt.Shape, shapes[nt.Name], nt.Name)
		require.Len(t, vals[nt.Name], len(nt.Data), nt.Name)
		for i := range nt.Data {
			require.Equal(t, math.Float32bits(nt.Data[i]), math.Float32bits(vals[nt.Name][i]), "%s[%d]", nt.Name, i)
		}
	}
}
