package tensor

// Scratch allocates the temporaries of one piece of work (a training step, a micro-batch) on
// one backend and releases them together. Host tensors belong to the garbage collector, so on
// the CPU Release has nothing to free; on a device it frees every tensor the Scratch made.
type Scratch struct {
	b     Backend
	owned []*Tensor
}

// NewScratch returns a Scratch on backend b (the CPU for nil).
func NewScratch(b Backend) *Scratch {
	if b == nil {
		b = CPU()
	}
	return &Scratch{b: b}
}

// Backend is where the Scratch allocates.
func (s *Scratch) Backend() Backend {
	if s == nil || s.b == nil {
		return CPU()
	}
	return s.b
}

// New returns a zeroed tensor of dtype dt and the given shape, owned by the Scratch.
func (s *Scratch) New(dt DType, shape ...int) (*Tensor, error) {
	if s == nil {
		return nil, Errorf(ErrParam, "tensor.Scratch.New", "s", "is nil (use NewScratch)")
	}
	t, err := New(s.Backend(), dt, shape...)
	if err != nil {
		return nil, err
	}
	return s.own(t), nil
}

// Put returns t on the Scratch's backend: t itself when it is there already, else a copy the
// Scratch owns.
func (s *Scratch) Put(t *Tensor) (*Tensor, error) {
	if s == nil {
		return nil, Errorf(ErrParam, "tensor.Scratch.Put", "s", "is nil (use NewScratch)")
	}
	if err := CheckTensor("tensor.Scratch.Put", "t", t); err != nil {
		return nil, err
	}
	if t.Backend() == s.Backend() {
		return t, nil
	}
	c, err := To(s.Backend(), t)
	if err != nil {
		return nil, err
	}
	return s.own(c), nil
}

func (s *Scratch) own(t *Tensor) *Tensor {
	if !t.IsHost() {
		s.owned = append(s.owned, t)
	}
	return t
}

// Release frees the device tensors the Scratch made (the first error is returned; the others
// are still freed). The Scratch can be used again afterwards.
func (s *Scratch) Release() error {
	if s == nil {
		return nil
	}
	var first error
	for _, t := range s.owned {
		if err := t.Release(); err != nil && first == nil {
			first = err
		}
	}
	s.owned = nil
	return first
}
