package loop

import (
	"math/rand/v2"

	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tensor"
)

// Completion is one sampled response.
type Completion struct {
	// Tokens are the response's token ids as sampled, the stop token included when the policy
	// stopped on one. At most Sampling.MaxTokens of them count (the rest are cut).
	Tokens []int32
	// Text is the decoded response the rewards read.
	Text string
}

// Sampling is how rollouts are sampled.
type Sampling struct {
	// N is the number of responses per prompt (a group; verl's rollout.n).
	N int
	// MaxTokens is T, the longest response in tokens (max_response_length): the columns of the
	// step's [B, T] tensors.
	MaxTokens int
	// Temperature 0 is greedy decoding; the log-probs of the update are those of logits /
	// Temperature (1 when it is 0).
	Temperature float64
	// TopP in (0, 1] and TopK (<= 0: off) cut the distribution before sampling.
	TopP float64
	TopK int
}

// Input selects the inputs of a scoring pass: the rows' own, or with their images perturbed.
type Input struct {
	// Perturb, when not nil, perturbs each row's image(s) with seed Seed and the row's id
	// (Batch.IDs): the same perturbation on any rank and in any micro-batch. The text is the
	// rows' own: the perturbed pass scores the completions already sampled.
	Perturb perturb.Perturbation
	Seed    uint64
}

// Batch is a step's rows: each prompt repeated Sampling.N times (a group's rows are adjacent),
// with its sampled completion. Policies read it; the loop owns it.
type Batch[P any] struct {
	Prompts     []P
	Completions []Completion
	// IDs are the rows' sample ids, unique in the run (the perturbation's per-row seed).
	IDs []uint64
	// T is the columns of the per-token tensors (Sampling.MaxTokens) and Temperature the
	// scoring temperature (> 0).
	T           int
	Temperature float32
	// Step is the RL step being taken (0-based).
	Step int
}

// Len is the number of rows.
func (b *Batch[P]) Len() int { return len(b.Prompts) }

// Tokens returns the completion token ids of rows [lo, hi) (the completions' own slices).
func (b *Batch[P]) Tokens(lo, hi int) [][]int32 {
	out := make([][]int32, hi-lo)
	for i := range out {
		out[i] = b.Completions[lo+i].Tokens
	}
	return out
}

// Scorer computes per-token log-probs of completions: the reference policy is one, and every
// Policy is.
type Scorer[P any] interface {
	// Backend is where the per-token tensors of the step live.
	Backend() tensor.Backend
	// LogProbs writes, for rows [lo, hi) of b, the log-prob of each completion token t given
	// the prompt and tokens before t (at b.Temperature) into logp, and the entropy of that
	// position's distribution into ent when ent is not nil. Both are float32 [hi-lo, b.T] on
	// Backend(); columns at and after a row's completion length are not read.
	LogProbs(b *Batch[P], lo, hi int, in Input, logp, ent *tensor.Tensor) error
}

// Policy is the model being trained, at the per-token log-prob boundary that tprl.Update works
// on. It owns its sampling and stopping, and its parameter gradients, which Forward and
// Backward accumulate; Parts.Gradients and Parts.Optimizer reach them.
type Policy[P any] interface {
	Scorer[P]
	// Generate samples one completion per prompt, prompt i with the random source rngs[i]
	// (nil when s.Temperature is 0: greedy).
	Generate(prompts []P, s Sampling, rngs []*rand.Rand) ([]Completion, error)
	// Forward is LogProbs (original inputs) that keeps what Backward needs.
	Forward(b *Batch[P], lo, hi int, logp, ent *tensor.Tensor) (Pass, error)
}

// Pass is one training forward pass of some rows.
type Pass interface {
	// Backward adds the gradient of the loss to the policy's parameter gradients, given
	// d loss / d logp and d loss / d ent (either may be nil, meaning zero), [rows, T] float32 on
	// the policy's backend.
	Backward(dLogProbs, dEntropy *tensor.Tensor) error
	// Release frees what the pass kept; it is called once, after Backward or instead of it.
	Release()
}

// Param is one parameter tensor of a policy and its gradient (float32, same shape).
type Param struct {
	Name        string
	Value, Grad *tensor.Tensor
	// Decay says whether AdamW's weight decay applies (matrices usually; biases and norms not).
	Decay bool
}

// TokenCounter is implemented by policies that know how many tokens a row's pass computes
// (its prompt and completion), which Config.MicroBatchTokens budgets.
type TokenCounter[P any] interface {
	RowTokens(b *Batch[P], row int) int
}

// Trainable is a Policy whose parameters are host tensors: the loop's default Gradients
// (HostGradients) and the shipped AdamW work on them. A policy on another backend supplies
// its own Parts.Gradients and Parts.Optimizer.
type Trainable interface {
	Params() []Param
}
