package main

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// near counts the pixels within tol of c in every channel.
func near(img image.Image, c color.RGBA, tol int) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			d := func(a uint32, w uint8) bool { return math.Abs(float64(a>>8)-float64(w)) <= float64(tol) }
			if d(r, c.R) && d(g, c.G) && d(bl, c.B) {
				n++
			}
		}
	}
	return n
}

func decode(t *testing.T, data []byte) image.Image {
	img, err := png.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	return img
}

// TestPlotPNGSmoothingDrawsRawCurveFaintly renders a noisy series with and without Smooth: both
// show the curve's colour; the smoothed plot also holds the faint (70/255 over white) raw line.
// NaN values, a single point and an empty series must not fail the plot.
func TestPlotPNGSmoothingDrawsRawCurveFaintly(t *testing.T) {
	col := color.RGBA{31, 119, 180, 255}
	faint := color.RGBA{194, 218, 234, 255} // 70/255 of col over white
	var s Series
	for i := range 100 {
		s.X, s.Y = append(s.X, float64(i)), append(s.Y, 0.5+0.4*math.Sin(float64(i)))
	}
	s.Y[40] = math.NaN()
	s.Name, s.Colour = "noisy", col
	one := Series{Name: "one point", Colour: color.RGBA{44, 160, 44, 255}, X: []float64{3}, Y: []float64{0.5}}
	empty := Series{Name: "empty"}

	plain := decode(t, must(PlotPNG("t", "step", "y", 0, 1, []Series{s, one, empty})))
	s.Smooth = 10
	smoothed := decode(t, must(PlotPNG("t", "step", "y", 0, 1, []Series{s, one, empty})))

	require.Equal(t, 768, plain.Bounds().Dx())
	require.Greater(t, plain.Bounds().Dy(), 461, "the legend strip adds height below the 4.8in plot")
	require.Greater(t, near(plain, col, 8), 200)
	require.Greater(t, near(smoothed, col, 8), 200)
	// Anti-aliased edges of the solid line pass through the faint colour too (about 950 pixels
	// here); the raw curve, 100 segments spanning the plot height, adds about as many again.
	nPlain, nSmoothed := near(plain, faint, 6), near(smoothed, faint, 6)
	require.Greater(t, nSmoothed, nPlain+500, "faint raw curve missing: %d vs %d faint pixels", nSmoothed, nPlain)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestTrailingMean(t *testing.T) {
	got := trailingMean([]float64{1, 3, math.NaN(), 5, 7}, 2)
	require.Equal(t, []float64{1, 2, 3, 5, 6}, got)
	require.True(t, math.IsNaN(trailingMean([]float64{math.NaN()}, 3)[0]))
}
