package tensor

// OnHost calls fn with host-resident views of ts, in the same order. Host tensors are passed
// as they are (no copy). Device tensors are copied to host memory first; after fn succeeds the
// first nOut of them (the outputs) are copied back. This is the fallback every op uses on a
// backend that lacks a fused kernel for it. Nil entries stay nil.
func OnHost(nOut int, ts []*Tensor, fn func(host []*Tensor) error) error {
	if fn == nil {
		return Errorf(ErrParam, "tensor.OnHost", "fn", "is nil")
	}
	host := make([]*Tensor, len(ts))
	staged := false
	for i, t := range ts {
		if t == nil || isHost(t) {
			host[i] = t
			continue
		}
		staged = true
		h, err := To(CPU(), t)
		if err != nil {
			return err
		}
		host[i] = h
	}
	if err := fn(host); err != nil {
		return err
	}
	if !staged {
		return nil
	}
	for i := 0; i < nOut && i < len(ts); i++ {
		if ts[i] == nil || host[i] == ts[i] {
			continue
		}
		if err := CopyInto(ts[i], host[i]); err != nil {
			return err
		}
	}
	return nil
}
