package vqa

import (
	"image"
	stddraw "image/draw"

	"golang.org/x/image/draw"
)

// Fit returns img as a size x size RGB image, the model's input: an image of that size is
// copied as it is; any other is scaled with Catmull-Rom (golang.org/x/image/draw) to fit inside,
// aspect ratio kept, and centred on the Background colour (letterboxed).
func Fit(img image.Image, size int) *image.RGBA {
	dst := image.NewRGBA(image.Rect(0, 0, size, size))
	b := img.Bounds()
	if b.Dx() == size && b.Dy() == size {
		stddraw.Draw(dst, dst.Bounds(), img, b.Min, stddraw.Src)
		return dst
	}
	stddraw.Draw(dst, dst.Bounds(), image.NewUniform(Background), image.Point{}, stddraw.Src)
	w, h := size, size
	if b.Dx() > b.Dy() {
		h = max(1, (b.Dy()*size+b.Dx()/2)/b.Dx())
	} else {
		w = max(1, (b.Dx()*size+b.Dy()/2)/b.Dy())
	}
	at := image.Rect((size-w)/2, (size-h)/2, (size-w)/2+w, (size-h)/2+h)
	draw.CatmullRom.Scale(dst, at, img, b, draw.Src, nil)
	return dst
}
