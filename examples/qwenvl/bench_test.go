package qwenvl

import (
	"testing"
)

// benchImage is a 1280×720 frame with detail everywhere (a 720p screenshot's size).
func benchImage() *RGB {
	img := NewRGB(1280, 720)
	for i := range img.Pix {
		img.Pix[i] = uint8(i*7 + i/3840*13)
	}
	return img
}

// BenchmarkPreprocess1280x720 times Processor.Images on one 1280×720 RGB image at the default
// min/max pixels (resized to 1288×728, 4784 patches): resize, rescale, normalise, patchify.
func BenchmarkPreprocess1280x720(b *testing.B) {
	proc, err := NewProcessor(DefaultProcessorConfig())
	if err != nil {
		b.Fatal(err)
	}
	imgs := []*RGB{benchImage()}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := proc.Images(imgs); err != nil {
			b.Fatal(err)
		}
	}
	perImage := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(1/perImage, "images/s")
	b.ReportMetric(1280*720/1e6/perImage, "MP/s")
}

// BenchmarkResizeBicubic1280x720 times the resize alone, to 1288×728.
func BenchmarkResizeBicubic1280x720(b *testing.B) {
	img := benchImage()
	b.ResetTimer()
	for b.Loop() {
		if _, err := ResizeBicubic(img, 1288, 728); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(1280*720/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MP/s")
}
