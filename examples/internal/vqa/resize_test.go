package vqa

import (
	"image"
	"image/color"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFit(t *testing.T) {
	// The right size: pixels unchanged.
	s := Generate(DefaultTaskConfig(), 1, 0, 1)[0]
	assert.Equal(t, Pixels(s.Image), Pixels(Fit(s.Image, 32)))

	// A wide white image: scaled to 32x16, centred, black bars above and below.
	wide := image.NewRGBA(image.Rect(0, 0, 200, 100))
	for i := range wide.Pix {
		wide.Pix[i] = 255
	}
	got := Fit(wide, 32)
	assert.Equal(t, image.Rect(0, 0, 32, 32), got.Bounds())
	assert.Equal(t, color.RGBA{255, 255, 255, 255}, got.RGBAAt(16, 16))
	assert.Equal(t, color.RGBA{255, 255, 255, 255}, got.RGBAAt(0, 8))
	assert.Equal(t, Background, got.RGBAAt(16, 7))
	assert.Equal(t, Background, got.RGBAAt(16, 24))

	// A tiny tall one is scaled up.
	tall := image.NewRGBA(image.Rect(0, 0, 3, 6))
	got = Fit(tall, 32)
	assert.Equal(t, image.Rect(0, 0, 32, 32), got.Bounds())
}

func TestTokenizerFrom(t *testing.T) {
	base := NewTokenizer()
	tok := NewTokenizerFrom([]string{"what is the zebra ?", "a zebra and an okapi"})
	assert.Equal(t, base.VocabSize()+2, tok.VocabSize())
	id, ok := tok.ID("zebra")
	assert.True(t, ok)
	assert.Equal(t, int32(base.VocabSize()), id)
	assert.Equal(t, "the zebra okapi", tok.Decode(tok.Encode("the zebra okapi")))
	assert.Equal(t, []string{"giraffe", "<bos>"}, tok.Unknown("the giraffe <bos> zebra"))
}
