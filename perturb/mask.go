package perturb

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// Fill sets every element of the uint8 tensor dst from values with numpy's broadcasting rule for
// np.full_like(img, values) (docs/semantics.md#complete-masking): one value fills everything; a
// list is aligned with the last axis and must have that axis's length. That axis is the channel
// axis of [H, W, C] images but the width of a grayscale [H, W] image, whose every row then gets the
// list. Any other length is an ErrShape error (numpy raises ValueError); values outside [0, 255]
// are ErrParam.
func Fill(dst *tensor.Tensor, values ...int) error {
	const op = "perturb.Fill"
	if dst == nil {
		return tensor.Errorf(tensor.ErrShape, op, "dst", "is nil")
	}
	if err := tensor.CheckDType(op, "dst", dst, tensor.Uint8); err != nil {
		return err
	}
	if err := checkFill(op, dst.Shape(), values); err != nil {
		return err
	}
	return tensor.OnHost(1, []*tensor.Tensor{dst}, func(h []*tensor.Tensor) error {
		d, _ := h[0].Uint8s()
		fill(d, values)
		return nil
	})
}

func checkFill(op string, s tensor.Shape, values []int) error {
	for i, v := range values {
		if v < 0 || v > 255 {
			return tensor.Errorf(tensor.ErrParam, op, "values", "values[%d] = %d is outside [0, 255]", i, v)
		}
	}
	last := 1
	if len(s) > 0 {
		last = s[len(s)-1]
	}
	if len(values) != 1 && len(values) != last {
		return tensor.Errorf(tensor.ErrShape, op, "values", "cannot broadcast %d values into shape %v (want 1 or %d)", len(values), s, last)
	}
	return nil
}

func fill(d []uint8, values []int) {
	if len(values) == 1 {
		v := uint8(values[0])
		for i := range d {
			d[i] = v
		}
		return
	}
	if len(d) == 0 {
		return
	}
	row := make([]uint8, len(values))
	for i, v := range values {
		row[i] = uint8(v)
	}
	for i := 0; i < len(d); i += len(row) {
		copy(d[i:], row)
	}
}

// Masking replaces the whole image by a constant (complete masking): Value holds one value for
// every element or one per element of the last axis (channels of [H, W, C], width of [H, W]),
// broadcast as Fill does. The zero value (empty Value) fills 0, a black image. Seed and sample
// ids are ignored.
type Masking struct {
	Value []int `json:"mask_value" yaml:"mask_value"`
}

// Kind returns CompleteMasking.
func (Masking) Kind() Kind { return CompleteMasking }

func (m Masking) values() []int {
	if len(m.Value) == 0 {
		return []int{0}
	}
	return m.Value
}

// Validate checks that every value lies in [0, 255]. Whether a list broadcasts depends on the
// image and is checked by Apply.
func (m Masking) Validate() error {
	for i, v := range m.Value {
		if v < 0 || v > 255 {
			return tensor.Errorf(tensor.ErrParam, "perturb.Masking.Validate", "Value", "Value[%d] = %d is outside [0, 255]", i, v)
		}
	}
	return nil
}

// Apply fills dst (the shape of the image src, [H, W] or [H, W, C]) with the mask value.
func (m Masking) Apply(dst, src *tensor.Tensor, _, _ uint64) error {
	const op = "perturb.Masking.Apply"
	if _, _, err := checkImages(op, dst, src, false); err != nil {
		return err
	}
	if err := checkFill(op, dst.Shape(), m.values()); err != nil {
		return err
	}
	return run(op, dst, src, false, nil, 0, func(d, _ []uint8, _ geom, _ uint64) { fill(d, m.values()) })
}

// ApplyBatch fills every image of a batch [N, H, W] or [N, H, W, C]. ids must have N entries.
func (m Masking) ApplyBatch(dst, src *tensor.Tensor, _ uint64, ids []uint64) error {
	const op = "perturb.Masking.ApplyBatch"
	if _, _, err := checkImages(op, dst, src, true); err != nil {
		return err
	}
	if err := checkFill(op, dst.Shape(), m.values()); err != nil {
		return err
	}
	return run(op, dst, src, true, ids, 0, func(d, _ []uint8, _ geom, _ uint64) { fill(d, m.values()) })
}
