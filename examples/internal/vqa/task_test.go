package vqa

import (
	"image"
	"image/color"
	"image/draw"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTokenizer(t *testing.T) {
	tok := NewTokenizer()
	assert.Equal(t, 73, tok.VocabSize())
	assert.LessOrEqual(t, tok.VocabSize(), 100)
	words := tok.Words()
	seen := map[string]bool{}
	for i, w := range words {
		assert.False(t, seen[w], "duplicate word %q", w)
		seen[w] = true
		id, ok := tok.ID(w)
		assert.True(t, ok)
		assert.Equal(t, int32(i), id)
	}
	assert.Equal(t, []string{"<pad>", "<bos>", "<eos>", "<unk>"}, words[:4])
	for _, w := range []string{"<think>", "</think>", "Answer:", "A", "J", "zero", "nine", "top", "left", "circle", "brown", "?"} {
		assert.True(t, seen[w], w)
	}
	// Round trip, unknown words, control words in text, specials in ids.
	text := "<think> the circle is red </think> Answer: B"
	assert.Equal(t, text, tok.Decode(tok.Encode(text)))
	assert.Equal(t, "<unk> is <unk>", tok.Decode(tok.Encode("  banana  is\tAnswer ")))
	assert.Equal(t, []int32{UNK, UNK, UNK, UNK}, tok.Encode("<pad> <bos> <eos> <unk>"))
	ids := append([]int32{BOS}, tok.Encode("what colour")...)
	ids = append(ids, EOS, PAD, PAD, -1, 1000)
	assert.Equal(t, "what colour <unk> <unk>", tok.Decode(ids))
	assert.Empty(t, tok.Encode(""))
	assert.Equal(t, "", tok.Decode(nil))
	// Identical across instances.
	assert.Equal(t, words, NewTokenizer().Words())
}

func TestTaskConfigValidate(t *testing.T) {
	require.NoError(t, DefaultTaskConfig().Validate())
	for _, c := range []struct {
		cfg  TaskConfig
		want string
	}{
		{TaskConfig{ImageSize: 7, MaxShapes: 3, Options: 4}, "ImageSize"},
		{TaskConfig{ImageSize: 513, MaxShapes: 3, Options: 4}, "ImageSize"},
		{TaskConfig{ImageSize: 32, MaxShapes: 0, Options: 4}, "MaxShapes"},
		{TaskConfig{ImageSize: 32, MaxShapes: 5, Options: 4}, "MaxShapes"},
		{TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 1}, "Options"},
		{TaskConfig{ImageSize: 32, MaxShapes: 3, Options: 11}, "Options"},
		{TaskConfig{}, "ImageSize"},
	} {
		err := c.cfg.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
		assert.Panics(t, func() { Generate(c.cfg, 1, 0, 1) })
	}
}

func TestGenerateDeterministic(t *testing.T) {
	cfg := DefaultTaskConfig()
	a := Generate(cfg, 7, 0, 50)
	b := Generate(cfg, 7, 20, 10) // ids 20..29
	for i := range b {
		assert.Equal(t, a[20+i].ID, b[i].ID)
		assert.Equal(t, a[20+i].Prompt, b[i].Prompt)
		assert.Equal(t, a[20+i].Response, b[i].Response)
		assert.Equal(t, a[20+i].Objects, b[i].Objects)
		assert.Equal(t, Pixels(a[20+i].Image), Pixels(b[i].Image))
	}
	c := Generate(cfg, 8, 0, 50)
	differ := 0
	for i := range a {
		if a[i].Prompt != c[i].Prompt || a[i].Response != c[i].Response {
			differ++
		}
	}
	assert.Greater(t, differ, 25)
	assert.Empty(t, Generate(cfg, 1, 0, 0))
}

// TestGenerateInvariants checks every generated sample: scene, prompt,
// options, answer, reference chain, vocabulary, reward and pixels.
func TestGenerateInvariants(t *testing.T) {
	tok := NewTokenizer()
	for _, cfg := range []TaskConfig{
		DefaultTaskConfig(),
		{ImageSize: 8, MaxShapes: 1, Options: 2},
		{ImageSize: 48, MaxShapes: 4, Options: 5},
		{ImageSize: 32, MaxShapes: 4, Options: 10},
	} {
		kinds := map[string]int{}
		counts := map[int]int{}
		letterCount := map[string]int{}
		for _, s := range Generate(cfg, 3, 0, 400) {
			k := len(s.Objects)
			require.True(t, k >= 1 && k <= cfg.MaxShapes)
			counts[k]++
			sh, co, po := map[string]bool{}, map[string]bool{}, map[string]bool{}
			for _, o := range s.Objects {
				require.GreaterOrEqual(t, indexOf(shapes, o.Shape), 0)
				require.GreaterOrEqual(t, indexOf(colours, o.Colour), 0)
				require.GreaterOrEqual(t, indexOf(positions, o.Position), 0)
				assert.False(t, sh[o.Shape] || co[o.Colour] || po[o.Position], "repeated value in %v", s.Objects)
				sh[o.Shape], co[o.Colour], po[o.Position] = true, true, true
				// The centre of the object's cell has its colour.
				cp := indexOf(positions, o.Position)
				cell := cfg.ImageSize / 2
				x, y := cp%2*cell+cell/2, cp/2*cell+cell/2
				if o.Shape == "triangle" {
					y += cell / 8
				}
				assert.Equal(t, palette[indexOf(colours, o.Colour)], s.Image.At(x, y), "%+v", o)
			}
			assert.Equal(t, color.RGBA{0, 0, 0, 255}, s.Image.At(0, 0))
			assert.Equal(t, cfg.ImageSize, s.Image.Bounds().Dx())
			assert.Equal(t, cfg.ImageSize, s.Image.Bounds().Dy())

			// Vocabulary: no unknown words.
			for _, text := range []string{s.Prompt, s.Response} {
				for _, id := range tok.Encode(text) {
					require.NotEqual(t, UNK, id, "%q", text)
				}
			}
			// Prompt: question, then exactly Options letters in order.
			q, opts, ok := strings.Cut(s.Prompt, " ? ")
			require.True(t, ok, s.Prompt)
			fields := strings.Fields(opts)
			var values []string
			next := 0
			for _, f := range fields {
				if next < cfg.Options && f == letters[next] {
					next++
					values = append(values, "")
					continue
				}
				values[len(values)-1] = strings.TrimSpace(values[len(values)-1] + " " + f)
			}
			require.Equal(t, cfg.Options, len(values), s.Prompt)
			distinct := map[string]bool{}
			for _, v := range values {
				distinct[v] = true
			}
			assert.Len(t, distinct, cfg.Options, s.Prompt)
			ai := indexOf(letters, s.Answer)
			require.True(t, ai >= 0 && ai < cfg.Options)
			letterCount[s.Answer]++
			correct := values[ai]
			assert.True(t, strings.HasSuffix(s.Response, " </think> Answer: "+s.Answer), s.Response)
			assert.Contains(t, s.Response, " "+correct+" ")
			// The answer is true of the scene.
			switch {
			case strings.HasPrefix(q, "how many"):
				kinds["count"]++
				assert.Equal(t, numbers[k], correct)
			case strings.HasPrefix(q, "what colour is the "):
				kinds["colour"]++
				shape := strings.TrimPrefix(q, "what colour is the ")
				assert.Contains(t, s.Objects, objectWith(s.Objects, shape, correct, ""))
			case strings.HasPrefix(q, "what shape is "):
				kinds["shape"]++
				colour := strings.TrimPrefix(q, "what shape is ")
				assert.Contains(t, s.Objects, objectWith(s.Objects, correct, colour, ""))
			case strings.HasPrefix(q, "where is the ") && strings.HasSuffix(q, " shape"):
				kinds["position of colour"]++
				colour := strings.TrimSuffix(strings.TrimPrefix(q, "where is the "), " shape")
				assert.Contains(t, s.Objects, objectWith(s.Objects, "", colour, correct))
			case strings.HasPrefix(q, "where is the "):
				kinds["position of shape"]++
				shape := strings.TrimPrefix(q, "where is the ")
				assert.Contains(t, s.Objects, objectWith(s.Objects, shape, "", correct))
			default:
				t.Fatalf("unknown question %q", q)
			}
			// The reference chain earns full reward.
			assert.Equal(t, Reward{1, 1, 1}, Score(s.Response, s.Answer, DefaultRewardWeights()))
		}
		// Every allowed kind, count and letter occurs.
		switch {
		case cfg.Options > 5:
			assert.Len(t, kinds, 2, "%+v %v", cfg, kinds)
		case cfg.Options == 5:
			assert.Len(t, kinds, 3, "%+v %v", cfg, kinds)
		default:
			assert.Len(t, kinds, 5, "%+v %v", cfg, kinds)
		}
		assert.Len(t, counts, cfg.MaxShapes)
		assert.Len(t, letterCount, cfg.Options)
	}
}

// objectWith returns the object of objs matching the non-empty fields, or a zero Object.
func objectWith(objs []Object, shape, colour, position string) Object {
	for _, o := range objs {
		if (shape == "" || o.Shape == shape) && (colour == "" || o.Colour == colour) && (position == "" || o.Position == position) {
			return o
		}
	}
	return Object{}
}

func TestRenderAndPixels(t *testing.T) {
	objs := []Object{{"circle", "red", "top left"}, {"square", "blue", "bottom right"}, {"star", "red", "top right"}}
	img := Render(16, objs)
	px := Pixels(img)
	require.Len(t, px, 16*16*3)
	at := func(x, y int) []uint8 { return px[(y*16+x)*3 : (y*16+x)*3+3] }
	assert.Equal(t, []uint8{220, 40, 40}, at(4, 4))
	assert.Equal(t, []uint8{50, 80, 230}, at(12, 12))
	assert.Equal(t, []uint8{0, 0, 0}, at(12, 4)) // unknown shape skipped
	// Pixels of a non-RGBA image give the same bytes.
	n := image64(img)
	assert.Equal(t, px, Pixels(n))
}

func TestQuestionKindString(t *testing.T) {
	assert.Equal(t, "colour_of_shape", ColourOfShape.String())
	assert.Equal(t, "position_of_colour", PositionOfColour.String())
	assert.Equal(t, "QuestionKind(9)", QuestionKind(9).String())
}

func BenchmarkGenerate(b *testing.B) {
	cfg := DefaultTaskConfig()
	id := uint64(0)
	for b.Loop() {
		Generate(cfg, 1, id, 1)
		id++
	}
}

// image64 copies img into an *image.NRGBA64 (a non-RGBA image type).
func image64(img *image.RGBA) image.Image {
	out := image.NewNRGBA64(img.Bounds())
	draw.Draw(out, out.Bounds(), img, image.Point{}, draw.Src)
	return out
}
