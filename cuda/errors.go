package cuda

import (
	"fmt"

	"github.com/mtrl-go/mtrl/tensor"
)

// ErrNotCompiled is returned by New in a build without the `cuda` tag. It wraps
// tensor.ErrDevice.
var ErrNotCompiled = fmt.Errorf("cuda: package built without the cuda build tag: %w", tensor.ErrDevice)
