package hfmodel

import (
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// RandomCheckpoint makes float32 weights for the model cfg describes, in Hugging Face's layout:
// matrices and embeddings ~ N(0, initializer_range²) as transformers initialises them; biases
// ~ N(0, initializer_range²) and norm weights 1 + N(0, initializer_range²) rather than
// transformers' zeros and ones, so a test notices a bias or norm weight read from the wrong
// place. Each tensor's values depend only on (seed, its name): the same seed gives the same
// model whatever the dtype or sharding it is saved with.
func RandomCheckpoint(cfg *Config, seed uint64) (*Checkpoint, error) {
	var tensors []*Tensor
	for _, s := range ExpectedTensors(cfg) {
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		vals := make([]float32, numel(s.Shape))
		offset := float32(0)
		if strings.HasSuffix(s.Name, "norm.weight") {
			offset = 1
		}
		for i := range vals {
			vals[i] = offset + float32(rng.NormFloat64()*cfg.InitializerRange)
		}
		t, err := NewTensor(s.Name, s.Shape, vals, Float32)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, t)
	}
	return NewCheckpoint(cfg, NewGenerationConfig(cfg), tensors)
}
