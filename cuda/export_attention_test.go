//go:build cuda

package cuda

import "github.com/mtrl-go/mtrl/tensor"

// OnLaunch makes f see the name of every kernel launched until restore is called.
func OnLaunch(f func(name string)) (restore func()) {
	old := launchHook.Swap(&f)
	return func() { launchHook.Store(old) }
}

// ScalarBF16Attention makes bfloat16 attention run on the scalar kernels until restore is called.
func ScalarBF16Attention() (restore func()) {
	old := attnScalarBF16.Swap(true)
	return func() { attnScalarBF16.Store(old) }
}

// MMACheck runs attention_mma_check_bf16 (one mma.m16n8k16 on one warp) on the device: d =
// a·b + c with a [16, 16] and b [16, 8] bfloat16 and c [16, 8] float32 tensors on b.
func MMACheck(b *Backend, a, bm, c *tensor.Tensor) (*tensor.Tensor, error) {
	const op = "MMACheck"
	d, err := tensor.New(b, tensor.Float32, 16, 8)
	if err != nil {
		return nil, err
	}
	return d, b.do(op, func() error {
		p, err := b.ptrs(op, []string{"d", "a", "b", "c"}, d, a, bm, c)
		if err != nil {
			return err
		}
		return b.launch(op, "attention_mma_check_bf16", 1, 1, 32, 0, ptrArg(p[0]), ptrArg(p[1]), ptrArg(p[2]), ptrArg(p[3]))
	})
}
