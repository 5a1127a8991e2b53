package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line of a plot.
type Series struct {
	Name   string
	Colour color.RGBA
	X, Y   []float64
	Dashed bool
}

// PlotPNG draws line series over a shared x axis with a fixed y range [ylo, yhi], a grid, tick
// labels, axis titles and a legend, and returns the PNG bytes. It draws with image/draw and the
// 7x13 bitmap font of golang.org/x/image, no plotting library.
func PlotPNG(title, xlabel string, ylo, yhi float64, series []Series) ([]byte, error) {
	const W, H = 800, 480
	const left, right, top, bottom = 60, 20, 36, 48
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)

	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, x := range s.X {
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	px := func(x float64) int { return left + int(math.Round((x-xmin)/(xmax-xmin)*pw)) }
	py := func(y float64) int {
		y = math.Max(ylo, math.Min(yhi, y))
		return top + int(math.Round((yhi-y)/(yhi-ylo)*ph))
	}
	grey, black := color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}

	// Grid and y ticks: 5 divisions.
	for i := 0; i <= 5; i++ {
		y := ylo + (yhi-ylo)*float64(i)/5
		line(img, left, py(y), W-right, py(y), grey, false)
		label := fmt.Sprintf("%.2f", y)
		text(img, left-6-7*len(label), py(y)+4, label, black)
	}
	// x ticks: about 8, at round numbers.
	step := niceStep((xmax - xmin) / 8)
	for x := math.Ceil(xmin/step) * step; x <= xmax+1e-9; x += step {
		line(img, px(x), top, px(x), H-bottom, grey, false)
		label := fmt.Sprintf("%g", x)
		text(img, px(x)-7*len(label)/2, H-bottom+16, label, black)
	}
	line(img, left, H-bottom, W-right, H-bottom, black, false)
	line(img, left, top, left, H-bottom, black, false)
	text(img, left+int(pw)/2-7*len(xlabel)/2, H-12, xlabel, black)
	text(img, W/2-7*len(title)/2, 22, title, black)

	for _, s := range series {
		for i := 1; i < len(s.X) && i < len(s.Y); i++ {
			if math.IsNaN(s.Y[i-1]) || math.IsNaN(s.Y[i]) {
				continue
			}
			thick(img, px(s.X[i-1]), py(s.Y[i-1]), px(s.X[i]), py(s.Y[i]), s.Colour, s.Dashed)
		}
		if len(s.X) == 1 && len(s.Y) == 1 && !math.IsNaN(s.Y[0]) {
			thick(img, px(s.X[0])-2, py(s.Y[0]), px(s.X[0])+2, py(s.Y[0]), s.Colour, false)
		}
	}
	// Legend, top left inside the plot.
	ly := top + 14
	for _, s := range series {
		thick(img, left+10, ly-4, left+34, ly-4, s.Colour, s.Dashed)
		text(img, left+40, ly, s.Name, black)
		ly += 16
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// line draws a 1-px line (Bresenham), dashed when asked.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for n := 0; ; n++ {
		if !dashed || (n/6)%2 == 0 {
			img.SetRGBA(x0, y0, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dashed bool) {
	for _, o := range [][2]int{{0, 0}, {0, 1}, {1, 0}} {
		line(img, x0+o[0], y0+o[1], x1+o[0], y1+o[1], c, dashed)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
