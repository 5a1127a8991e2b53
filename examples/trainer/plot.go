package main

import (
	"bytes"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one curve of a plot.
type Series struct {
	Name   string
	Colour color.RGBA
	X, Y   []float64
	Dashed bool
	// Smooth > 1 draws the raw values as a faint thin line and, on top, their trailing mean over
	// Smooth points: per-step RL metrics are noisy, and the mean alone would hide how noisy.
	Smooth int
	// Points marks every value (for sparse series such as validation every few steps).
	Points bool
	// Band, when set, is a half-width per point: the area Y±Band is shaded under the line
	// (mean ± standard error of several runs).
	Band []float64
}

// PlotPNG draws series over a shared x axis with the y axis fixed to [ylo, yhi] (so plots of
// different runs compare at a glance), with gonum/plot's axes, ticks, grid and axis labels, and
// a legend in a strip below the plot, where it never hides a curve; it returns the PNG bytes
// (768 pixels wide, 96 dpi). Non-finite values break a line.
func PlotPNG(title, xlabel, ylabel string, ylo, yhi float64, series []Series) ([]byte, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(lo, hi) })
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.Padding = vg.Points(2)

	var top []plot.Plotter // the main lines, added after every faint one so they stay on top
	for _, s := range series {
		n := min(len(s.X), len(s.Y))
		x, y := s.X[:n], s.Y[:n]
		var thumbs []plot.Thumbnailer
		if len(s.Band) >= n && n > 1 {
			pts := make(plotter.XYs, 0, 2*n)
			for i := 0; i < n; i++ {
				pts = append(pts, plotter.XY{X: x[i], Y: y[i] + s.Band[i]})
			}
			for i := n - 1; i >= 0; i-- {
				pts = append(pts, plotter.XY{X: x[i], Y: y[i] - s.Band[i]})
			}
			poly, err := plotter.NewPolygon(pts)
			if err != nil {
				return nil, err
			}
			poly.Color = color.NRGBA{R: s.Colour.R, G: s.Colour.G, B: s.Colour.B, A: 50}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		if s.Smooth > 1 {
			faint := color.NRGBA{R: s.Colour.R, G: s.Colour.G, B: s.Colour.B, A: 70}
			raw, err := lines(x, y, faint, 0.75, false)
			if err != nil {
				return nil, err
			}
			for _, l := range raw {
				p.Add(l)
			}
			y = trailingMean(y, s.Smooth)
		}
		ls, err := lines(x, y, s.Colour, 2, s.Dashed)
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			top = append(top, l)
		}
		if len(ls) > 0 {
			thumbs = append(thumbs, ls[0])
		}
		if s.Points || n == 1 {
			sc, err := scatter(x, y, s.Colour)
			if err != nil {
				return nil, err
			}
			if sc != nil {
				top = append(top, sc)
				thumbs = append(thumbs, sc)
			}
		}
		if len(thumbs) > 0 {
			leg.Add(s.Name, thumbs...)
		}
	}
	p.Add(top...)
	p.Y.Min, p.Y.Max = ylo, yhi
	if p.X.Min >= p.X.Max { // no data, or a single step
		p.X.Min, p.X.Max = p.X.Min-0.5, p.X.Min+0.5
	}
	lr := leg.Rectangle(draw.Canvas{})
	strip := lr.Max.Y - lr.Min.Y
	if strip > 0 {
		strip += vg.Points(10)
	}
	const width, plotHeight = 8 * vg.Inch, 4.8 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, plotHeight+strip), vgimg.UseDPI(96))
	dc := draw.New(img)
	area, legArea := dc, dc
	area.Min.Y += strip
	legArea.Max.Y = legArea.Min.Y + strip
	legArea.Min.X += vg.Points(48) // under the data area, past the y axis
	legArea.Max.Y -= vg.Points(4)
	p.Draw(area)
	leg.Draw(legArea)
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// lines returns one plotter.Line per run of finite points (NaN or ±Inf break the line, as a
// skipped metric should).
func lines(x, y []float64, c color.Color, width float64, dashed bool) ([]*plotter.Line, error) {
	var out []*plotter.Line
	var run plotter.XYs
	flush := func() error {
		if len(run) >= 2 {
			l, err := plotter.NewLine(run)
			if err != nil {
				return err
			}
			l.Color, l.Width = c, vg.Points(width)
			if dashed {
				l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			}
			out = append(out, l)
		}
		run = nil
		return nil
	}
	for i := range x {
		if finite(x[i]) && finite(y[i]) {
			run = append(run, plotter.XY{X: x[i], Y: y[i]})
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return out, flush()
}

func scatter(x, y []float64, c color.Color) (*plotter.Scatter, error) {
	var pts plotter.XYs
	for i := range x {
		if finite(x[i]) && finite(y[i]) {
			pts = append(pts, plotter.XY{X: x[i], Y: y[i]})
		}
	}
	if len(pts) == 0 {
		return nil, nil
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	sc.Color, sc.Radius, sc.Shape = c, vg.Points(2.5), draw.CircleGlyph{}
	return sc, nil
}

// ticks labels the fixed y range at fifths, with unlabelled minor ticks at tenths (gonum's
// default picks as few as three labels for [0, 1]).
func ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for i := 0; i <= 10; i++ {
		v := lo + (hi-lo)*float64(i)/10
		t := plot.Tick{Value: v}
		if i%2 == 0 {
			t.Label = strconv.FormatFloat(v, 'g', 3, 64)
		}
		out = append(out, t)
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// trailingMean replaces each value by the mean of the finite values among the last k up to it.
func trailingMean(y []float64, k int) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		var sum float64
		var n int
		for _, v := range y[max(0, i-k+1) : i+1] {
			if finite(v) {
				sum += v
				n++
			}
		}
		out[i] = math.NaN()
		if n > 0 {
			out[i] = sum / float64(n)
		}
	}
	return out
}
