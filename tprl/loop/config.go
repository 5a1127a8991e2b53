package loop

import (
	"fmt"
	"math"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/tprl"
)

// Config is one RL step's recipe, assembled from the library's own configurations.
type Config struct {
	// Steps is the number of RL steps of the run (the learning-rate schedule's length).
	Steps int
	// Prompts is the number of prompts per step (rollout_batch_size); the step has
	// Prompts × Sampling.N rows.
	Prompts  int
	Sampling Sampling
	// Filter, when not nil, is online filtering (DAPO's dynamic sampling).
	Filter *Filter
	// Advantage is the estimator; groups are the prompts.
	Advantage advantage.Config
	// Update is the VPPO policy update: token filters, trajectory shaping, the clipped
	// objective, the KL loss and entropy penalty. Its WorldSize is set from Parts.Comm.
	Update tprl.UpdateConfig
	// Perturb, when not nil, is the image perturbation of the perturbed scoring pass, whose
	// log-probs give the perception score (needed by perception filtering and shaping).
	Perturb perturb.Perturbation
	// RewardKL, when not nil, puts the divergence to the reference in the reward
	// (EasyR1's apply_kl_penalty); it needs Parts.Reference.
	RewardKL *RewardKL
	// MiniBatchPrompts is the prompts per optimizer step (global_batch_size); PPOEpochs the
	// passes over the step's rows.
	MiniBatchPrompts, PPOEpochs int
	// UpdateRows and ScoreRows are the rows per micro-batch of the update and of the scoring
	// passes, per rank (micro_batch_size_per_device_for_update / _for_experience).
	UpdateRows, ScoreRows int
	// MicroBatchTokens > 0 builds both kinds of micro-batches by a token budget instead (verl's
	// use_dynamic_bsz with ppo_max_token_len_per_gpu): runs of consecutive rows whose tokens
	// (TokenCounter's count when the policy has one, else the completions' lengths) stay within
	// it, a row over the budget alone; UpdateRows and ScoreRows are then not read. The loss is
	// normalised over the mini-batch, so the gradient is the fixed split's up to the order of
	// the float32 sums.
	MicroBatchTokens int
	// MaxGradNorm clips the gradient's global norm (0: no clipping).
	MaxGradNorm float64
	// LR is the learning-rate schedule over the optimizer steps of the run.
	LR Schedule
	// Seed keys the rollout sampling (per step, round and row), the perturbation and the random
	// token filter (tprl.RandomKey).
	Seed uint64
}

// Filter is online filtering: only groups whose mean Key reward lies in (Low, High) are kept,
// and more prompts are sampled until the step has Config.Prompts groups. Groups where every
// response scores the same carry no group-relative signal.
type Filter struct {
	// Key is a reward function's name or "overall".
	Key       string
	Low, High float64
	// MaxRounds bounds the sampling rounds of a step (0: 8); after them the batch is completed
	// with rejected groups (counted in filter/filled_groups) rather than stalling the run.
	MaxRounds int
}

// RewardKL is the divergence in the reward.
type RewardKL struct {
	Kind divergence.Kind
	// Controller gives the coefficient (fixed or adaptive), updated with each step's
	// divergence; its Coef is the initial one (State carries the current one).
	Controller divergence.ControllerConfig
}

// Validate checks the parts of the configuration the loop itself reads; the library
// configurations are validated by their own Validate.
func (c Config) Validate() error {
	s := c.Sampling
	switch {
	case c.Steps < 1:
		return fmt.Errorf("loop: Steps is %d, want >= 1", c.Steps)
	case c.Prompts < 1:
		return fmt.Errorf("loop: Prompts is %d, want >= 1", c.Prompts)
	case s.N < 1:
		return fmt.Errorf("loop: Sampling.N is %d, want >= 1", s.N)
	case s.MaxTokens < 1:
		return fmt.Errorf("loop: Sampling.MaxTokens is %d, want >= 1", s.MaxTokens)
	case !(s.Temperature >= 0) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("loop: Sampling.Temperature is %v, want a finite value >= 0", s.Temperature)
	case !(s.TopP > 0 && s.TopP <= 1):
		return fmt.Errorf("loop: Sampling.TopP is %v, want (0, 1]", s.TopP)
	case c.MiniBatchPrompts < 1 || c.Prompts%c.MiniBatchPrompts != 0:
		return fmt.Errorf("loop: MiniBatchPrompts is %d, want a divisor of Prompts %d", c.MiniBatchPrompts, c.Prompts)
	case c.PPOEpochs < 1:
		return fmt.Errorf("loop: PPOEpochs is %d, want >= 1", c.PPOEpochs)
	case c.UpdateRows < 1 || c.ScoreRows < 1:
		return fmt.Errorf("loop: UpdateRows %d and ScoreRows %d must be >= 1", c.UpdateRows, c.ScoreRows)
	case c.MicroBatchTokens < 0:
		return fmt.Errorf("loop: MicroBatchTokens is %d, want >= 0 (0: micro-batches of UpdateRows and ScoreRows rows)", c.MicroBatchTokens)
	case !(c.MaxGradNorm >= 0) || math.IsInf(c.MaxGradNorm, 0):
		return fmt.Errorf("loop: MaxGradNorm is %v, want a finite value >= 0 (0: no clipping)", c.MaxGradNorm)
	}
	if f := c.Filter; f != nil {
		if !(f.Low < f.High) || f.MaxRounds < 0 {
			return fmt.Errorf("loop: Filter (%v, %v) with %d rounds: want Low < High and MaxRounds >= 0", f.Low, f.High, f.MaxRounds)
		}
	}
	if k := c.RewardKL; k != nil {
		if err := k.Controller.Validate(); err != nil {
			return err
		}
		if k.Kind == divergence.Full {
			return fmt.Errorf("loop: RewardKL.Kind %v needs the whole distribution; the reward penalty is per sampled token (kl, abs, mse, low_var_kl)", k.Kind)
		}
	}
	if err := c.Advantage.Validate(); err != nil {
		return err
	}
	if c.Perturb != nil {
		if err := c.Perturb.Validate(); err != nil {
			return err
		}
	}
	if err := c.LR.Validate(); err != nil {
		return err
	}
	return c.Update.Validate()
}
