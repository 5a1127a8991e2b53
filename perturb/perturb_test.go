package perturb

import (
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func randImage(r *rand.Rand, shape ...int) *tensor.Tensor {
	n := tensor.Shape(shape).NumElements()
	p := make([]uint8, n)
	for i := range p {
		p[i] = uint8(1 + r.IntN(255)) // never 0, so blackened pixels are recognisable
	}
	return tensor.Must(tensor.FromUint8(p, shape...))
}

func u8(t *tensor.Tensor) []uint8 { v, _ := t.Uint8s(); return v }

func like(t *tensor.Tensor) *tensor.Tensor { return tensor.Must(tensor.NewLike(t, tensor.Uint8)) }

func allPerturbations() []Perturbation {
	return []Perturbation{DefaultBlackening(), Blackening{PatchSize: 3, Prob: 0.3}, DefaultNoise(), Noise{Mean: 5, Std: 10},
		Masking{}, Masking{Value: []int{1, 2, 3}}, DefaultBlur(), Blur{Radius: 0.7}}
}

func TestKindRoundTrip(t *testing.T) {
	for k := PatchBlackening; k <= GaussianBlur; k++ {
		got, err := ParseKind(k.String())
		require.NoError(t, err)
		assert.Equal(t, k, got)
		p, err := Default(k)
		require.NoError(t, err)
		assert.Equal(t, k, p.Kind())
		require.NoError(t, p.Validate())
		b, err := json.Marshal(k)
		require.NoError(t, err)
		var k2 Kind
		require.NoError(t, json.Unmarshal(b, &k2))
		assert.Equal(t, k, k2)
	}
	_, err := ParseKind("blur")
	assert.ErrorIs(t, err, tensor.ErrParam)
	_, err = Default(Kind(9))
	assert.ErrorIs(t, err, tensor.ErrParam)
	assert.Equal(t, "Kind(9)", Kind(9).String())
}

func TestBlackenPatchesPartialEdges(t *testing.T) {
	// 5×7 gray image, 3-pixel patches: 2×3 grid with partial bottom row and right column.
	src := tensor.Must(tensor.FromUint8(slices.Repeat([]uint8{9}, 35), 5, 7))
	grid := Grid{Rows: 2, Cols: 3, Black: []bool{false, false, true, true, false, false}}
	dst := like(src)
	require.NoError(t, BlackenPatches(dst, src, grid, 3))
	want := []uint8{
		9, 9, 9, 9, 9, 9, 0,
		9, 9, 9, 9, 9, 9, 0,
		9, 9, 9, 9, 9, 9, 0,
		0, 0, 0, 9, 9, 9, 9,
		0, 0, 0, 9, 9, 9, 9,
	}
	assert.Equal(t, want, u8(dst))
	assert.Equal(t, slices.Repeat([]uint8{9}, 35), u8(src), "src unchanged")
	// Multi-channel: all channels of a blackened pixel are zero.
	src3 := randImage(rand.New(rand.NewPCG(1, 1)), 4, 5, 4)
	d3 := like(src3)
	require.NoError(t, BlackenPatches(d3, src3, Grid{Rows: 2, Cols: 2, Black: []bool{false, true, false, false}}, 3))
	for y := range 4 {
		for x := range 5 {
			for ch := range 4 {
				i := (y*5+x)*4 + ch
				if y < 3 && x >= 3 {
					assert.Zero(t, u8(d3)[i])
				} else {
					assert.Equal(t, u8(src3)[i], u8(d3)[i])
				}
			}
		}
	}
}

func TestPatchGrid(t *testing.T) {
	g, err := PatchGrid(30, 45, 14, 0.5, []float64{0.1, 0.5, 0.9, 0.49, 0, 1, 0.3, 0.7, 0.5, 0.5, 0.2, 0.8})
	require.NoError(t, err)
	assert.Equal(t, 3, g.Rows)
	assert.Equal(t, 4, g.Cols)
	assert.Equal(t, []bool{true, false, false, true, true, false, true, false, false, false, true, false}, g.Black)
	_, err = PatchGrid(30, 45, 14, 0.5, make([]float64, 11))
	assert.ErrorIs(t, err, tensor.ErrShape)
	r, c := GridSize(0, 5, 3)
	assert.Equal(t, [2]int{0, 2}, [2]int{r, c})
}

// Same seed and id give the same result; results do not depend on batch order or GOMAXPROCS.
func TestReproducibility(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	const n = 6
	batch := randImage(r, n, 30, 29, 3)
	ids := []uint64{17, 3, 99, 4, 5, 1 << 40}
	for _, p := range allPerturbations() {
		want := like(batch)
		require.NoError(t, p.ApplyBatch(want, batch, 42, ids))
		// Each image alone with Apply.
		for i := range n {
			img := tensor.Must(tensor.Must(batch.Rows(i, i+1)).Reshape(30, 29, 3))
			out := like(img)
			require.NoError(t, p.Apply(out, img, 42, ids[i]))
			wi := tensor.Must(want.Rows(i, i+1))
			assert.Equal(t, u8(wi), u8(out), "%T image %d", p, i)
			out2 := like(img)
			require.NoError(t, p.Apply(out2, img, 42, ids[i]))
			assert.Equal(t, u8(out), u8(out2))
		}
		// Reversed batch order.
		rev := like(batch)
		rsz := 30 * 29 * 3
		for i := range n {
			copy(u8(rev)[i*rsz:(i+1)*rsz], u8(batch)[(n-1-i)*rsz:(n-i)*rsz])
		}
		rids := slices.Clone(ids)
		slices.Reverse(rids)
		rout := like(rev)
		require.NoError(t, p.ApplyBatch(rout, rev, 42, rids))
		for i := range n {
			assert.Equal(t, u8(want)[i*rsz:(i+1)*rsz], u8(rout)[(n-1-i)*rsz:(n-i)*rsz], "%T reversed", p)
		}
		// GOMAXPROCS 1.
		prev := runtime.GOMAXPROCS(1)
		one := like(batch)
		err := p.ApplyBatch(one, batch, 42, ids)
		runtime.GOMAXPROCS(prev)
		require.NoError(t, err)
		assert.Equal(t, u8(want), u8(one), "%T GOMAXPROCS=1", p)
	}
	// Different seeds or ids differ for the random perturbations.
	img := randImage(r, 28, 28, 3)
	a, b, c := like(img), like(img), like(img)
	bl := DefaultBlackening()
	require.NoError(t, bl.Apply(a, img, 1, 1))
	require.NoError(t, bl.Apply(b, img, 1, 2))
	require.NoError(t, bl.Apply(c, img, 2, 1))
	assert.NotEqual(t, u8(a), u8(b))
	assert.NotEqual(t, u8(a), u8(c))
}

func TestBlackeningMatchesGrid(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 5))
	img := randImage(r, 45, 31)
	b := Blackening{PatchSize: 7, Prob: 0.4}
	g, err := b.Grid(45, 31, 8, 9)
	require.NoError(t, err)
	want, got := like(img), like(img)
	require.NoError(t, BlackenPatches(want, img, g, 7))
	require.NoError(t, b.Apply(got, img, 8, 9))
	assert.Equal(t, u8(want), u8(got))
	// In place.
	require.NoError(t, b.Apply(img, img, 8, 9))
	assert.Equal(t, u8(want), u8(img))
	// Prob 0 and 1.
	out := like(img)
	require.NoError(t, Blackening{PatchSize: 5, Prob: 1}.Apply(out, img, 1, 1))
	assert.Equal(t, make([]uint8, 45*31), u8(out))
	require.NoError(t, Blackening{PatchSize: 5, Prob: 0}.Apply(out, img, 1, 1))
	assert.Equal(t, u8(img), u8(out))
}

func TestAddNoise(t *testing.T) {
	src := tensor.Must(tensor.FromUint8([]uint8{10, 20, 30, 40, 250, 0, 7, 128}, 1, 2, 4))
	dst := like(src)
	require.NoError(t, AddNoise(dst, src, []float64{-20, 0.9, -0.5, 10.99, -1, 1e9}))
	// RGBA: alpha (40, 128) untouched; truncation toward zero; clipping.
	assert.Equal(t, []uint8{0, 20, 29, 40, 255, 0, 255, 128}, u8(dst))
	_, err := func() (int, error) { return 0, AddNoise(dst, src, make([]float64, 8)) }()
	assert.ErrorIs(t, err, tensor.ErrShape)
	// Gray [H, W]: every pixel gets noise.
	g := tensor.Must(tensor.FromUint8([]uint8{100, 100}, 1, 2))
	require.NoError(t, AddNoise(g, g, []float64{0.5, -0.5}))
	assert.Equal(t, []uint8{100, 99}, u8(g))
	// Seeded noise leaves alpha alone and Std 0 Mean 0 is the identity.
	r := rand.New(rand.NewPCG(6, 7))
	img := randImage(r, 9, 8, 4)
	out := like(img)
	require.NoError(t, DefaultNoise().Apply(out, img, 3, 4))
	for i := 3; i < 9*8*4; i += 4 {
		require.Equal(t, u8(img)[i], u8(out)[i])
	}
	assert.NotEqual(t, u8(img), u8(out))
	require.NoError(t, Noise{}.Apply(out, img, 3, 4))
	assert.Equal(t, u8(img), u8(out))
}

func TestFill(t *testing.T) {
	img := randImage(rand.New(rand.NewPCG(1, 2)), 2, 3)
	require.NoError(t, Fill(img, 1, 2, 3)) // grayscale: a list of length W fills every row
	assert.Equal(t, []uint8{1, 2, 3, 1, 2, 3}, u8(img))
	require.NoError(t, Fill(img, 7))
	assert.Equal(t, slices.Repeat([]uint8{7}, 6), u8(img))
	assert.ErrorIs(t, Fill(img, 1, 2), tensor.ErrShape)
	assert.ErrorIs(t, Fill(img), tensor.ErrShape)
	assert.ErrorIs(t, Fill(img, 256), tensor.ErrParam)
	rgb := randImage(rand.New(rand.NewPCG(1, 2)), 2, 2, 3)
	out := like(rgb)
	require.NoError(t, Masking{Value: []int{10, 20, 30}}.Apply(out, rgb, 0, 0))
	assert.Equal(t, slices.Repeat([]uint8{10, 20, 30}, 4), u8(out))
	require.NoError(t, Masking{}.Apply(out, rgb, 0, 0))
	assert.Equal(t, make([]uint8, 12), u8(out))
}

func TestBlur(t *testing.T) {
	// A constant image stays constant; radius 0 copies.
	c := tensor.Must(tensor.FromUint8(slices.Repeat([]uint8{77}, 10*9*3), 10, 9, 3))
	out := like(c)
	require.NoError(t, Blur{Radius: 2.5}.Apply(out, c, 0, 0))
	assert.Equal(t, u8(c), u8(out))
	img := randImage(rand.New(rand.NewPCG(3, 3)), 12, 11, 3)
	out = like(img)
	require.NoError(t, Blur{}.Apply(out, img, 0, 0))
	assert.Equal(t, u8(img), u8(out))
	// Against a direct 2-D convolution in float64 with clamped edges (±1 for float32 rounding).
	const sigma = 1.3
	require.NoError(t, Blur{Radius: sigma}.Apply(out, img, 0, 0))
	k := gaussKernel(sigma)
	r := len(k) - 1
	h, w, ch := 12, 11, 3
	p := u8(img)
	for y := range h {
		for x := range w {
			for cc := range ch {
				var acc float64
				for dy := -r; dy <= r; dy++ {
					for dx := -r; dx <= r; dx++ {
						yy, xx := min(max(y+dy, 0), h-1), min(max(x+dx, 0), w-1)
						acc += float64(k[abs(dy)]) * float64(k[abs(dx)]) * float64(p[(yy*w+xx)*ch+cc])
					}
				}
				got := float64(u8(out)[(y*w+x)*ch+cc])
				require.InDelta(t, acc, got, 0.5+1e-3, "(%d,%d,%d)", y, x, cc)
			}
		}
	}
	// In place gives the same result.
	cp := tensor.Must(tensor.FromUint8(slices.Clone(p), h, w, ch))
	require.NoError(t, Blur{Radius: sigma}.Apply(cp, cp, 0, 0))
	assert.Equal(t, u8(out), u8(cp))
	// An impulse spreads symmetrically.
	imp := tensor.Must(tensor.FromUint8(make([]uint8, 81), 9, 9))
	u8(imp)[40] = 255
	io := like(imp)
	require.NoError(t, Blur{Radius: 1}.Apply(io, imp, 0, 0))
	q := u8(io)
	assert.Less(t, q[40], uint8(255))
	assert.Equal(t, q[39], q[41])
	assert.Equal(t, q[31], q[49])
	assert.Equal(t, q[30], q[50])
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestImageRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, shape := range [][]int{{5, 7}, {5, 7, 3}, {5, 7, 4}} {
		src := randImage(r, shape...)
		if len(shape) == 3 && shape[2] == 4 {
			u8(src)[3] = 100 // not opaque
		}
		img, err := ToImage(src)
		require.NoError(t, err)
		assert.Equal(t, image.Rect(0, 0, 7, 5), img.Bounds())
		back, err := FromImage(img)
		require.NoError(t, err)
		assert.Equal(t, src.Shape(), back.Shape(), "%v", shape)
		assert.Equal(t, u8(src), u8(back), "%v", shape)
	}
	// [H, W, 1] becomes a Gray image and comes back as [H, W].
	g1 := randImage(r, 3, 4, 1)
	img, err := ToImage(g1)
	require.NoError(t, err)
	back, err := FromImage(img)
	require.NoError(t, err)
	assert.Equal(t, tensor.Shape{3, 4}, back.Shape())
	assert.Equal(t, u8(g1), u8(back))
	// A generic image (RGBA, premultiplied) with a sub-rectangle.
	rgba := image.NewRGBA(image.Rect(2, 3, 5, 5))
	rgba.Set(2, 3, color.RGBA{10, 20, 30, 255})
	rgba.Set(4, 4, color.RGBA{50, 0, 0, 128})
	tt, err := FromImage(rgba)
	require.NoError(t, err)
	assert.Equal(t, tensor.Shape{2, 3, 4}, tt.Shape())
	assert.Equal(t, []uint8{10, 20, 30, 255}, u8(tt)[:4])
	assert.Equal(t, color.NRGBAModel.Convert(color.RGBA{50, 0, 0, 128}).(color.NRGBA).R, u8(tt)[20])
	rgb, err := FromImageAs(rgba, 3)
	require.NoError(t, err)
	assert.Equal(t, tensor.Shape{2, 3, 3}, rgb.Shape())
	gray, err := FromImageAs(rgba, 1)
	require.NoError(t, err)
	assert.Equal(t, tensor.Shape{2, 3}, gray.Shape())
	_, err = FromImageAs(rgba, 2)
	assert.ErrorIs(t, err, tensor.ErrParam)
	// ApplyImage.
	out, err := ApplyImage(Blackening{PatchSize: 1, Prob: 1}, rgba, 0, 0)
	require.NoError(t, err)
	ot, _ := FromImageAs(out, 4)
	for i, v := range u8(ot) {
		if i%4 != 3 {
			assert.Zero(t, v)
		}
	}
}

func TestInputsUnchanged(t *testing.T) {
	img := randImage(rand.New(rand.NewPCG(9, 9)), 3, 16, 15, 3)
	orig := slices.Clone(u8(img))
	for _, p := range allPerturbations() {
		out := like(img)
		require.NoError(t, p.ApplyBatch(out, img, 1, []uint64{1, 2, 3}))
		assert.Equal(t, orig, u8(img), "%T", p)
	}
}

func TestBadInputs(t *testing.T) {
	img := randImage(rand.New(rand.NewPCG(1, 1)), 4, 4, 3)
	out := like(img)
	two := randImage(rand.New(rand.NewPCG(1, 1)), 4, 4, 2)
	r4 := randImage(rand.New(rand.NewPCG(1, 1)), 1, 4, 4, 3)
	f32 := tensor.Must(tensor.FromFloat32(make([]float32, 48), 4, 4, 3))
	batch := randImage(rand.New(rand.NewPCG(1, 1)), 2, 4, 4, 3)
	r1 := randImage(rand.New(rand.NewPCG(1, 1)), 4)
	cases := []struct {
		name, op, arg string
		kind          error
		err           error
	}{
		{"patch size 0", "perturb.Blackening.Apply", "PatchSize", tensor.ErrParam, Blackening{PatchSize: 0, Prob: 0.5}.Apply(out, img, 0, 0)},
		{"prob 1.5", "perturb.Blackening.Apply", "Prob", tensor.ErrParam, Blackening{PatchSize: 2, Prob: 1.5}.Apply(out, img, 0, 0)},
		{"prob -0.1", "perturb.Blackening.Validate", "Prob", tensor.ErrParam, Blackening{PatchSize: 2, Prob: -0.1}.Validate()},
		{"wrong rank", "perturb.Blackening.Apply", "src", tensor.ErrShape, DefaultBlackening().Apply(like(r4), r4, 0, 0)},
		{"channels 2", "perturb.Noise.Apply", "src", tensor.ErrShape, DefaultNoise().Apply(like(two), two, 0, 0)},
		{"dst shape", "perturb.Blackening.Apply", "dst", tensor.ErrShape, DefaultBlackening().Apply(like(two), img, 0, 0)},
		{"dtype", "perturb.Blur.Apply", "src", tensor.ErrDType, DefaultBlur().Apply(f32, f32, 0, 0)},
		{"ids", "perturb.Blackening.ApplyBatch", "ids", tensor.ErrShape, DefaultBlackening().ApplyBatch(like(batch), batch, 0, []uint64{1})},
		{"batch rank", "perturb.Noise.ApplyBatch", "src", tensor.ErrShape, DefaultNoise().ApplyBatch(like(r1), r1, 0, nil)},
		{"std", "perturb.Noise.Apply", "Std", tensor.ErrParam, Noise{Std: -1}.Apply(out, img, 0, 0)},
		{"radius", "perturb.Blur.Apply", "Radius", tensor.ErrParam, Blur{Radius: -1}.Apply(out, img, 0, 0)},
		{"mask value", "perturb.Masking.Apply", "values", tensor.ErrParam, Masking{Value: []int{300}}.Apply(out, img, 0, 0)},
		{"mask broadcast", "perturb.Masking.Apply", "values", tensor.ErrShape, Masking{Value: []int{1, 2}}.Apply(out, img, 0, 0)},
		{"grid", "perturb.BlackenPatches", "grid", tensor.ErrShape, BlackenPatches(out, img, Grid{Rows: 1, Cols: 1, Black: []bool{true}}, 2)},
		{"nil src", "perturb.AddNoise", "src", tensor.ErrShape, AddNoise(out, nil, nil)},
		{"nil image", "perturb.ToImage", "t", tensor.ErrShape, func() error { _, err := ToImage(nil); return err }()},
	}
	for _, c := range cases {
		require.Error(t, c.err, c.name)
		assert.True(t, errors.Is(c.err, c.kind), "%s: %v", c.name, c.err)
		var te *tensor.Error
		require.True(t, errors.As(c.err, &te), c.name)
		assert.Equal(t, c.op, te.Op, c.name)
		assert.Equal(t, c.arg, te.Arg, c.name)
		assert.True(t, strings.Contains(c.err.Error(), c.op), c.name)
	}
}
