package advantage

import "github.com/mtrl-go/mtrl/tensor"

// checkTokens validates the [B, T] float32 tensors shared by every estimator: rewards and mask
// (inputs), adv (required output) and returns (optional output, nil allowed).
func checkTokens(op string, adv, returns, rewards, mask *tensor.Tensor) error {
	if err := tensor.CheckShape(op, "rewards", rewards, -1, -1); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "rewards", rewards, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, "rewards", rewards, "mask", mask); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "mask", mask, tensor.Float32); err != nil {
		return err
	}
	if err := tensor.CheckSameShape(op, "rewards", rewards, "adv", adv); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, "adv", adv, tensor.Float32); err != nil {
		return err
	}
	if returns != nil {
		if err := tensor.CheckSameShape(op, "rewards", rewards, "returns", returns); err != nil {
			return err
		}
		if err := tensor.CheckDType(op, "returns", returns, tensor.Float32); err != nil {
			return err
		}
	}
	return tensor.CheckSameBackend(op, []string{"adv", "returns", "rewards", "mask"}, adv, returns, rewards, mask)
}

// checkRowVector validates a per-response [B] tensor of the given dtype on rewards' backend.
func checkRowVector(op, arg string, t, rewards *tensor.Tensor, dtype tensor.DType) error {
	if t == nil {
		return tensor.Errorf(tensor.ErrShape, op, arg, "is nil")
	}
	if err := tensor.CheckShape(op, arg, t, rewards.Dim(0)); err != nil {
		return err
	}
	if err := tensor.CheckDType(op, arg, t, dtype); err != nil {
		return err
	}
	return tensor.CheckSameBackend(op, []string{"rewards", arg}, rewards, t)
}

// f32s returns the host data of a float32 tensor, or nil for a nil tensor.
func f32s(t *tensor.Tensor) []float32 {
	if t == nil {
		return nil
	}
	v, _ := t.Float32s()
	return v
}

// rowGrain is the parallel chunk size (in rows) for per-row kernels on rows of length cols.
func rowGrain(cols int) int {
	return max(1, (1<<15)/max(cols, 1))
}
