package loop

import (
	"fmt"
	"math/rand/v2"
)

// Data supplies the prompts of each step.
type Data[P any] interface {
	// Next returns the next n prompts.
	Next(n int) []P
}

// Epochs is Data over a fixed set of prompts, visited in epochs; with Shuffle each epoch's order
// is a permutation that depends on (Seed, epoch) only, so a run resumed from State sees the
// same prompts.
type Epochs[P any] struct {
	Items   []P
	Shuffle bool
	Seed    uint64

	epoch, pos int
	order      []int
}

// NewEpochs returns Data over items, starting at the first epoch.
func NewEpochs[P any](items []P, shuffle bool, seed uint64) *Epochs[P] {
	e := &Epochs[P]{Items: items, Shuffle: shuffle, Seed: seed}
	e.order = e.permutation(0)
	return e
}

// Next implements Data, crossing into the next epoch as needed.
func (e *Epochs[P]) Next(n int) []P {
	if n <= 0 || len(e.Items) == 0 {
		return nil
	}
	out := make([]P, 0, n)
	for len(out) < n {
		if e.pos >= len(e.order) {
			e.epoch++
			e.pos = 0
			e.order = e.permutation(e.epoch)
		}
		out = append(out, e.Items[e.order[e.pos]])
		e.pos++
	}
	return out
}

// Position is the epoch and the index into its order of the next prompt.
func (e *Epochs[P]) Position() (epoch, pos int) { return e.epoch, e.pos }

// Seek moves to a Position.
func (e *Epochs[P]) Seek(epoch, pos int) error {
	if epoch < 0 || pos < 0 || pos > len(e.Items) {
		return fmt.Errorf("loop: data position epoch %d, index %d is outside %d prompts", epoch, pos, len(e.Items))
	}
	e.epoch, e.pos, e.order = epoch, pos, e.permutation(epoch)
	return nil
}

func (e *Epochs[P]) permutation(epoch int) []int {
	p := make([]int, len(e.Items))
	for i := range p {
		p[i] = i
	}
	if e.Shuffle {
		r := rand.New(rand.NewPCG(e.Seed^0x73687566, uint64(epoch))) // "shuf"
		r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	}
	return p
}
