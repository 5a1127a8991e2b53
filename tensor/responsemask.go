package tensor

// ResponseMask writes into dst [B, T] (float32) the response mask of token ids [B, T] (int32):
// 1 up to and including the first end-of-sequence token of each row, 0 after it. Any id in eos
// ends a sequence. This is the reference's get_response_mask.
func ResponseMask(dst, ids *Tensor, eos ...int32) error {
	const op = "tensor.ResponseMask"
	if err := CheckShape(op, "ids", ids, -1, -1); err != nil {
		return err
	}
	if err := CheckDType(op, "ids", ids, Int32); err != nil {
		return err
	}
	if err := CheckSameShape(op, "ids", ids, "dst", dst); err != nil {
		return err
	}
	if err := CheckDType(op, "dst", dst, Float32); err != nil {
		return err
	}
	if err := CheckSameBackend(op, []string{"ids", "dst"}, ids, dst); err != nil {
		return err
	}
	if len(eos) == 0 {
		return Errorf(ErrParam, op, "eos", "no end-of-sequence id given")
	}
	cols := ids.Dim(1)
	return OnHost(1, []*Tensor{dst, ids}, func(h []*Tensor) error {
		m, _ := h[0].Float32s()
		id, _ := h[1].Int32s()
		for r := 0; r < ids.Dim(0); r++ {
			ended := false
			for t := r * cols; t < (r+1)*cols; t++ {
				if ended {
					m[t] = 0
					continue
				}
				m[t] = 1
				for _, e := range eos {
					ended = ended || id[t] == e
				}
			}
		}
		return nil
	})
}
