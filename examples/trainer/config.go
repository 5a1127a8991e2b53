package main

import (
	_ "embed"
	"encoding"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/examples/internal/vqa"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

//go:embed default.yaml
var defaultYAML []byte

// Config is the trainer's configuration, with the seeds' (MTRL / EasyR1) section and key names.
type Config struct {
	Dataset      DatasetConfig      `yaml:"dataset" json:"dataset"`
	Training     TrainingConfig     `yaml:"training" json:"training"`
	Optimization OptimizationConfig `yaml:"optimization" json:"optimization"`
	Worker       WorkerConfig       `yaml:"worker" json:"worker"`

	set           map[string]int // keys given by a file or an override, with the order they came in
	setCount      int
	warnings      []string // accepted keys that do nothing here, one line each
	deviceOrdinal int      // CUDA device of this rank (its index among the process's ranks); set by Run
}

// DatasetConfig selects the data: files in the seeds' format, or a task generated in memory.
type DatasetConfig struct {
	TrainFiles   string `yaml:"train_files" json:"train_files"` // comma-separated
	ValFiles     string `yaml:"val_files" json:"val_files"`
	PromptKey    string `yaml:"prompt_key" json:"prompt_key"`
	AnswerKey    string `yaml:"answer_key" json:"answer_key"`
	ImageKey     string `yaml:"image_key" json:"image_key"`
	VideoKey     string `yaml:"video_key" json:"video_key"`
	IgnoreVideos bool   `yaml:"ignore_videos" json:"ignore_videos"`
	ImageDir     string `yaml:"image_dir" json:"image_dir"`
	// FormatPrompt is a Jinja file that rewrites each string prompt (its variable content) before
	// the chat template, as EasyR1's data.format_prompt; with model_path only.
	FormatPrompt          string `yaml:"format_prompt" json:"format_prompt"`
	MaxPromptLength       int    `yaml:"max_prompt_length" json:"max_prompt_length"`
	MaxResponseLength     int    `yaml:"max_response_length" json:"max_response_length"`
	RolloutBatchSize      int    `yaml:"rollout_batch_size" json:"rollout_batch_size"`
	ValBatchSize          int    `yaml:"val_batch_size" json:"val_batch_size"` // -1: the whole set at once
	Shuffle               bool   `yaml:"shuffle" json:"shuffle"`
	Seed                  uint64 `yaml:"seed" json:"seed"`
	FilterOverlongPrompts bool   `yaml:"filter_overlong_prompts" json:"filter_overlong_prompts"`
	MinPixels             int    `yaml:"min_pixels" json:"min_pixels"`
	MaxPixels             int    `yaml:"max_pixels" json:"max_pixels"`
	// The generated task (used when the files are empty) and the model's input image side.
	TrainSize int `yaml:"train_size" json:"train_size"`
	ValSize   int `yaml:"val_size" json:"val_size"`
	ImageSize int `yaml:"image_size" json:"image_size"`
	MaxShapes int `yaml:"max_shapes" json:"max_shapes"`
	Options   int `yaml:"options" json:"options"`
	// OrderedOptions lists a generated question's options in the value lists' order.
	OrderedOptions bool `yaml:"ordered_options" json:"ordered_options"`
	// Task is the generated task's reference chain: short (the visual fact alone) or reasoning
	// (the fact among image-independent text, vqa.ReasoningChain; no planted bias, so the
	// warm-start shortcut is dropped).
	Task vqa.ChainStyle `yaml:"task" json:"task"`
}

// TrainingConfig is the loop: budget, warm start, validation, checkpoints, outputs.
type TrainingConfig struct {
	TotalEpochs  int     `yaml:"total_epochs" json:"total_epochs"`
	Steps        int     `yaml:"steps" json:"steps"`
	SFTSteps     int     `yaml:"sft_steps" json:"sft_steps"`
	SFTBatchSize int     `yaml:"sft_batch_size" json:"sft_batch_size"`
	SFTLR        float64 `yaml:"sft_lr" json:"sft_lr"`
	// SFTBlind warm-starts on blind references (vqa.BlindResponse): the reference chain with its
	// visual fact replaced by a random option's value and that option's letter, drawn afresh each
	// time, so the warm start teaches the format and the letters but not what the image shows.
	SFTBlind bool `yaml:"sft_blind" json:"sft_blind"`
	// SFTShortcut is the fraction of warm-start references that answer option A whatever the
	// image shows (vqa.BlindResponse with letter A): a position bias such as multiple-choice data
	// with A over-represented. Generated task only: with dataset.train_files the default is
	// dropped and a nonzero value is an error. The other references are true, so the warm start both grounds the
	// policy and teaches it the shortcut; RL, rewarded on the true letter, has to unlearn it.
	SFTShortcut float64 `yaml:"sft_shortcut" json:"sft_shortcut"`
	// SFTShortcutSteps limits the shortcut to the last SFTShortcutSteps warm-start steps (0: all
	// of them): true references first ground the policy, then biased ones teach the shortcut on
	// top of a perception that is still there for RL to use.
	SFTShortcutSteps int `yaml:"sft_shortcut_steps" json:"sft_shortcut_steps"`
	// SFTSaveFreq checkpoints the warm start every SFTSaveFreq steps (and on an interrupt), so
	// that it resumes where it stopped; 0: only on an interrupt.
	SFTSaveFreq        int        `yaml:"sft_save_freq" json:"sft_save_freq"`
	ProjectName        string     `yaml:"project_name" json:"project_name"`
	ExperimentName     string     `yaml:"experiment_name" json:"experiment_name"`
	Logger             StringList `yaml:"logger" json:"logger"`
	Nnodes             int        `yaml:"nnodes" json:"nnodes"`
	NGPUsPerNode       int        `yaml:"n_gpus_per_node" json:"n_gpus_per_node"`
	SaveFreq           int        `yaml:"save_freq" json:"save_freq"`
	ValFreq            int        `yaml:"val_freq" json:"val_freq"`
	ValBeforeTrain     bool       `yaml:"val_before_train" json:"val_before_train"`
	ValOnly            bool       `yaml:"val_only" json:"val_only"`
	LoadCheckpointPath string     `yaml:"load_checkpoint_path" json:"load_checkpoint_path"`
	FindLastCheckpoint bool       `yaml:"find_last_checkpoint" json:"find_last_checkpoint"`
	// FallbackCheckpoint resumes from the newest intact checkpoint when newer ones fail their
	// checksums (with a warning; they are kept as <name>.damaged). Off, that is an error that
	// names the damaged file and the intact checkpoint.
	FallbackCheckpoint bool   `yaml:"fallback_checkpoint" json:"fallback_checkpoint"`
	RunDir             string `yaml:"run_dir" json:"run_dir"`
	Seed               uint64 `yaml:"seed" json:"seed"`
	RolloutSamples     int    `yaml:"rollout_samples" json:"rollout_samples"`
	RolloutLogFreq     int    `yaml:"rollout_log_freq" json:"rollout_log_freq"`
	Progress           bool   `yaml:"progress" json:"progress"`
}

// OptimizationConfig is the algorithm: advantages, divergence (KL) control, online filtering,
// entropy penalty, and the token-perception part. The token-perception keys are tprl.Config's
// own, inlined, so the library's tags, defaults and validation apply unchanged.
type OptimizationConfig struct {
	AdvantageEstimator advantage.Estimator `yaml:"advantage_estimator" json:"advantage_estimator"`
	Gamma              float64             `yaml:"gamma" json:"gamma"`
	Lam                float64             `yaml:"lam" json:"lam"`
	// disable_divergence: no reference model at all. Otherwise the divergence to the frozen
	// warm-started policy enters the loss (use_divergence_loss) or the reward (the default).
	DisableDivergence  bool                      `yaml:"disable_divergence" json:"disable_divergence"`
	UseDivergenceLoss  bool                      `yaml:"use_divergence_loss" json:"use_divergence_loss"`
	DivergencePenalty  divergence.Kind           `yaml:"divergence_penalty" json:"divergence_penalty"`
	DivergenceCoef     float64                   `yaml:"divergence_coef" json:"divergence_coef"`
	DivergenceType     divergence.ControllerType `yaml:"divergence_type" json:"divergence_type"`
	DivergenceTarget   float64                   `yaml:"divergence_target" json:"divergence_target"`
	DivergenceHorizon  float64                   `yaml:"divergence_horizon" json:"divergence_horizon"`
	OnlineFiltering    bool                      `yaml:"online_filtering" json:"online_filtering"`
	FilterKey          string                    `yaml:"filter_key" json:"filter_key"`
	FilterLow          float64                   `yaml:"filter_low" json:"filter_low"`
	FilterHigh         float64                   `yaml:"filter_high" json:"filter_high"`
	UseEntropyPenalty  bool                      `yaml:"use_entropy_penalty" json:"use_entropy_penalty"`
	EntropyPenaltyCoef float64                   `yaml:"entropy_penalty_coef" json:"entropy_penalty_coef"`

	tprl.Config  `yaml:",inline"`
	Perturbation perturb.Kind `yaml:"perturbation" json:"perturbation"`
	PatchSize    int          `yaml:"patch_size" json:"patch_size"`
	BlackProb    float64      `yaml:"black_prob" json:"black_prob"`
	NoiseStd     float64      `yaml:"noise_std" json:"noise_std"`
	BlurRadius   float64      `yaml:"blur_radius" json:"blur_radius"`
}

// WorkerConfig holds the actor (policy, optimizer, model), the critic, rollout and reward.
type WorkerConfig struct {
	Actor   ActorConfig   `yaml:"actor" json:"actor"`
	Critic  CriticConfig  `yaml:"critic" json:"critic"`
	Rollout RolloutConfig `yaml:"rollout" json:"rollout"`
	Reward  RewardConfig  `yaml:"reward" json:"reward"`
}

// ActorConfig is the PPO update and its optimizer.
type ActorConfig struct {
	GlobalBatchSize                      int          `yaml:"global_batch_size" json:"global_batch_size"`
	MicroBatchSizePerDeviceForUpdate     int          `yaml:"micro_batch_size_per_device_for_update" json:"micro_batch_size_per_device_for_update"`
	MicroBatchSizePerDeviceForExperience int          `yaml:"micro_batch_size_per_device_for_experience" json:"micro_batch_size_per_device_for_experience"`
	PPOEpochs                            int          `yaml:"ppo_epochs" json:"ppo_epochs"`
	LossType                             ppo.LossType `yaml:"loss_type" json:"loss_type"`
	LossAvgMode                          ppo.AggMode  `yaml:"loss_avg_mode" json:"loss_avg_mode"`
	ClipRatioLow                         float64      `yaml:"clip_ratio_low" json:"clip_ratio_low"`
	ClipRatioHigh                        float64      `yaml:"clip_ratio_high" json:"clip_ratio_high"`
	ClipRatioDual                        float64      `yaml:"clip_ratio_dual" json:"clip_ratio_dual"`
	MaxGradNorm                          float64      `yaml:"max_grad_norm" json:"max_grad_norm"`
	Optim                                OptimConfig  `yaml:"optim" json:"optim"`
	Model                                ModelConfig  `yaml:"model" json:"model"`
	// Device runs the policy's forward and backward on "cpu" (the default; "" is cpu) or "cuda"
	// (device 0, needs a binary built with -tags cuda; see device_cuda.go).
	Device string `yaml:"device" json:"device"`
	// GradReduce is how the actor's gradients are summed over micro-batches and ranks:
	// "ordered" (each micro-batch's gradient apart, added in one device's order: the same bits
	// on any number of ranks) or "bucketed" (micro-batches summed on each rank, then a bucketed
	// reduce-scatter and all-gather: less memory and traffic, last-bit differences with N).
	// With device=cuda on several ranks, bucketed sums the micro-batches on each device and
	// all-reduces the sums between the devices with NCCL, bucket by bucket (-tags cuda,nccl).
	GradReduce string `yaml:"grad_reduce" json:"grad_reduce"`
	// GradBucketMB is the bucket of the sharded reductions in MiB of float32 gradient.
	GradBucketMB float64 `yaml:"grad_bucket_mb" json:"grad_bucket_mb"`
	// FSDP is verl's section; sharding_strategy picks the optimizer's sharding and
	// mixed_precision_dtype the model_path model's compute dtype, the other keys are accepted
	// and ignored.
	FSDP FSDPConfig `yaml:"fsdp" json:"fsdp"`
	// Offload is EasyR1's offload section: offload_optimizer keeps the AdamW state, the float32
	// masters and the optimizer step in host memory with device=cuda (offload.go).
	Offload OffloadConfig `yaml:"offload" json:"offload"`
	// PaddingFree packs a micro-batch's sequences end to end (cu_seqlens) on the model_path
	// path; false right-pads them to the longest prompt plus max_response_length, as without
	// remove_padding (the same losses, the padding's compute on top).
	PaddingFree bool `yaml:"padding_free" json:"padding_free"`
	// DynamicBatching builds the model_path path's micro-batches by MaxTokenLenPerDevice
	// prompt and response tokens instead of micro_batch_size_per_device_* rows.
	DynamicBatching      bool `yaml:"dynamic_batching" json:"dynamic_batching"`
	MaxTokenLenPerDevice int  `yaml:"max_token_len_per_device" json:"max_token_len_per_device"`
	// Checkpoint is how a model_path run exports its model in Hugging Face's layout.
	Checkpoint ExportConfig `yaml:"checkpoint" json:"checkpoint"`
}

// ExportConfig is the model_path export (the run directory's hf/ and each checkpoint's): the
// weights' dtype and shard size, as transformers' save_pretrained takes them.
type ExportConfig struct {
	// TorchDType is float32, bfloat16 or float16; empty: model_path's own torch_dtype
	// (config.json), float32 when it has none.
	TorchDType string `yaml:"torch_dtype" json:"torch_dtype"`
	// MaxShardSize is the largest weights file ("5GB", "500MB", "2GiB" or a byte count): the
	// weights go into model-0000i-of-0000K.safetensors files of at most this size with
	// model.safetensors.index.json, or model.safetensors when they fit in one.
	MaxShardSize string `yaml:"max_shard_size" json:"max_shard_size"`
}

// FSDPConfig is the sharding of the actor's training state over the data-parallel ranks.
type FSDPConfig struct {
	// ShardingStrategy (FSDP's names, as verl's; or Megatron-FSDP's): NO_SHARD, every rank
	// holds the whole AdamW state; SHARD_GRAD_OP, ZeRO-2: each rank keeps the AdamW moments
	// and reduced gradient of its shard of the parameters and the updated shards are
	// all-gathered after each step (loop.ShardedAdamW); optim, ZeRO-1: the moments sharded,
	// the reduced gradient whole on every rank. FULL_SHARD and the hybrid ones would also
	// shard the parameters or replicate across nodes (shardingStrategies); this trainer's
	// models run whole, so they run as SHARD_GRAD_OP, with a warning.
	ShardingStrategy string `yaml:"sharding_strategy" json:"sharding_strategy"`
	// MixedPrecisionDType is the model_path model's compute dtype: fp32, or bf16 (bfloat16
	// weights and activations over float32 masters, gradients and AdamW; hflm.SetMixedPrecision).
	MixedPrecisionDType string `yaml:"mixed_precision_dtype" json:"mixed_precision_dtype"`
	// ReduceDType is the gradients' dtype: fp32 only (verl's mixed_precision.reduce_dtype).
	ReduceDType string `yaml:"reduce_dtype" json:"reduce_dtype"`
	// CPUOffload (EasyR1's enable_cpu_offload) is offload.offload_optimizer's switch too.
	CPUOffload bool `yaml:"cpu_offload" json:"cpu_offload"`
}

// MixedPrecision is the compute dtype of mixed_precision_dtype (float32 for "").
func (f FSDPConfig) MixedPrecision() (tensor.DType, error) {
	switch strings.ToLower(f.MixedPrecisionDType) {
	case "", "fp32", "float32":
		return tensor.Float32, nil
	case "bf16", "bfloat16":
		return tensor.BFloat16, nil
	}
	return 0, keyErr("worker.actor.fsdp.mixed_precision_dtype", "is %q, want fp32 or bf16 (fp16 is not supported: its range needs loss scaling)", f.MixedPrecisionDType)
}

// shardingStrategies are the sharding_strategy names: PyTorch FSDP's (verl's and EasyR1's
// fsdp section) and Megatron-FSDP's (data_parallel_sharding_strategy), with the ZeRO stage
// each runs as here and, where FSDP would shard more than this trainer does, what (the
// warning's text). This trainer's models run whole, so parameters are never sharded (no
// ZeRO-3), and the ranks form one sharding group (no hybrid replicas across nodes).
var shardingStrategies = map[string]struct {
	stage loop.Sharding
	more  string
}{
	"NO_SHARD":            {0, ""},                   // DDP: everything replicated
	"SHARD_GRAD_OP":       {loop.ShardGradients, ""}, // ZeRO-2
	"FULL_SHARD":          {loop.ShardGradients, "FSDP would also shard the parameters between their uses (ZeRO-3)"},
	"HYBRID_SHARD":        {loop.ShardGradients, "FSDP would run FULL_SHARD within each node and keep one replica per node; here the shards span all ranks"},
	"_HYBRID_SHARD_ZERO2": {loop.ShardGradients, "FSDP would shard within each node and keep one replica per node; here the shards span all ranks"},
	"no_shard":            {0, ""},
	"optim":               {loop.ShardOptimizer, ""}, // ZeRO-1
	"optim_grads":         {loop.ShardGradients, ""},
	"optim_grads_params":  {loop.ShardGradients, "Megatron-FSDP would also shard the parameters (ZeRO-3)"},
}

// Sharding is the loop's ZeRO stage of the strategy (0: none).
func (f FSDPConfig) Sharding() (loop.Sharding, error) {
	if s, ok := shardingStrategies[f.ShardingStrategy]; ok {
		return s.stage, nil
	}
	return 0, keyErr("worker.actor.fsdp.sharding_strategy", "is %q, want NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD or _HYBRID_SHARD_ZERO2 (FSDP's), or no_shard, optim (ZeRO-1), optim_grads or optim_grads_params (Megatron-FSDP's)", f.ShardingStrategy)
}

// CriticConfig is the value model of gae: a separate small model of the actor's shape (see
// critic.go), trained with the clipped value loss.
type CriticConfig struct {
	CliprangeValue float64     `yaml:"cliprange_value" json:"cliprange_value"`
	Optim          OptimConfig `yaml:"optim" json:"optim"`
}

// OptimConfig is AdamW with a learning-rate schedule.
type OptimConfig struct {
	LR              float64   `yaml:"lr" json:"lr"`
	Betas           []float64 `yaml:"betas" json:"betas"`
	Eps             float64   `yaml:"eps" json:"eps"`
	WeightDecay     float64   `yaml:"weight_decay" json:"weight_decay"`
	WarmupSteps     int       `yaml:"warmup_steps" json:"warmup_steps"`
	LRWarmupRatio   float64   `yaml:"lr_warmup_ratio" json:"lr_warmup_ratio"` // used when warmup_steps is 0
	LRSchedulerType string    `yaml:"lr_scheduler_type" json:"lr_scheduler_type"`
	MinLRRatio      float64   `yaml:"min_lr_ratio" json:"min_lr_ratio"` // cosine / linear floor
}

// ModelConfig sizes the policy (a small vision-language transformer), or names a Hugging Face
// checkpoint to train instead (model_path, hf.go) with LoRA keys as the seeds' (PEFT's).
type ModelConfig struct {
	PatchSize int    `yaml:"patch_size" json:"patch_size"`
	Dim       int    `yaml:"dim" json:"dim"`
	Layers    int    `yaml:"layers" json:"layers"`
	Heads     int    `yaml:"heads" json:"heads"`
	MLPDim    int    `yaml:"mlp_dim" json:"mlp_dim"`
	Seed      uint64 `yaml:"seed" json:"seed"`
	// ModelPath is a Hugging Face checkpoint directory (Qwen2ForCausalLM, LlamaForCausalLM) with
	// its tokenizer and chat template: the policy is that model, on text prompts. Empty: the
	// built-in vision-language model above.
	ModelPath string `yaml:"model_path" json:"model_path"`
	// TokenizerPath is the directory of model_path's tokenizer and chat template when they are
	// not beside its weights (EasyR1's tokenizer_path); empty: model_path.
	TokenizerPath string `yaml:"tokenizer_path" json:"tokenizer_path"`
	// LoraRank > 0 trains LoRA adapters of that rank on the model_path model (0: full
	// fine-tuning), scaled by LoraAlpha / LoraRank, with dropout LoraDropout on their input, on
	// the modules TargetModules selects and ExcludeModules (verl's exclude_modules) does not,
	// as PEFT selects them: module names matching a name or its end (q_proj, attn.qkv), one
	// regular expression over whole names, or all-linear (every linear layer but lm_head; on a
	// Qwen2-VL model_path the vision tower's and its merger's too).
	LoraRank       int        `yaml:"lora_rank" json:"lora_rank"`
	LoraAlpha      float64    `yaml:"lora_alpha" json:"lora_alpha"`
	LoraDropout    float64    `yaml:"lora_dropout" json:"lora_dropout"`
	TargetModules  StringList `yaml:"target_modules" json:"target_modules"`
	ExcludeModules StringList `yaml:"exclude_modules" json:"exclude_modules"`
	// EnableGradientCheckpointing recomputes each decoder layer's activations in the backward
	// (the model_path model; the built-in model keeps its activations).
	EnableGradientCheckpointing bool `yaml:"enable_gradient_checkpointing" json:"enable_gradient_checkpointing"`
	// FreezeVisionTower keeps a Qwen2-VL model_path's vision tower fixed, its LoRA adapters
	// too (verl freezes model.visual after adding them); false trains it in full, or under
	// LoRA through its adapters alone. The built-in model trains whole.
	FreezeVisionTower bool `yaml:"freeze_vision_tower" json:"freeze_vision_tower"`
}

// RolloutConfig is sampling.
type RolloutConfig struct {
	N              int     `yaml:"n" json:"n"`
	Temperature    float64 `yaml:"temperature" json:"temperature"`
	TopP           float64 `yaml:"top_p" json:"top_p"`
	TopK           int     `yaml:"top_k" json:"top_k"` // <= 0: off (vLLM's -1)
	ValTemperature float64 `yaml:"val_temperature" json:"val_temperature"`
}

// RewardConfig is the rule-based reward of the task.
type RewardConfig struct {
	RewardType     string  `yaml:"reward_type" json:"reward_type"`
	AccuracyWeight float64 `yaml:"accuracy_weight" json:"accuracy_weight"`
	FormatWeight   float64 `yaml:"format_weight" json:"format_weight"`
	// The MDI reward of TRL-MDI (mdi.go); weight 0 turns it off.
	MDIWeight       float64 `yaml:"mdi_weight" json:"mdi_weight"`
	MDIBalanceRatio float64 `yaml:"mdi_balance_ratio" json:"mdi_balance_ratio"`
}

// StringList is a YAML list of strings that also accepts one string ("console") or a
// comma-separated one ("console,jsonl").
type StringList []string

// UnmarshalYAML accepts a scalar or a sequence.
func (s *StringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*s = nil
		for _, f := range strings.Split(n.Value, ",") {
			if f = strings.TrimSpace(f); f != "" {
				*s = append(*s, f)
			}
		}
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*s = l
		return nil
	}
	return fmt.Errorf("want a string or a list of strings")
}

// ConfigError is an invalid or unknown configuration key.
type ConfigError struct {
	Key string // dotted path, e.g. "worker.actor.optim.lr"
	Msg string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("config: %s: %s", e.Key, e.Msg) }

func keyErr(key, format string, args ...any) error {
	return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// aliases maps other names of a key (this trainer's earlier names, EasyR1's kl_* names and
// section names) to its place here. A prefix ending in "." renames a whole section.
var aliases = map[string]string{
	"training.adv_estimator":             "optimization.advantage_estimator",
	"training.gamma":                     "optimization.gamma",
	"training.lam":                       "optimization.lam",
	"training.save_checkpoint_path":      "training.run_dir",
	"worker.actor.use_kl_loss":           "optimization.use_divergence_loss",
	"worker.actor.kl_penalty":            "optimization.divergence_penalty",
	"worker.actor.kl_coef":               "optimization.divergence_coef",
	"worker.actor.use_entropy_penalty":   "optimization.use_entropy_penalty",
	"worker.actor.entropy_penalty_coef":  "optimization.entropy_penalty_coef",
	"worker.rollout.max_response_length": "dataset.max_response_length",
	"worker.rollout.max_new_tokens":      "dataset.max_response_length",
	// EasyR1's validation sampling (n is always 1 here).
	"worker.rollout.val_override_config.temperature": "worker.rollout.val_temperature",
	"optimization.adv_estimator":                     "optimization.advantage_estimator",
	"worker.actor.model.lora_target_modules":         "worker.actor.model.target_modules",
	"worker.actor.optim.lr_warmup_steps":             "worker.actor.optim.warmup_steps",
	"worker.critic.optim.lr_warmup_steps":            "worker.critic.optim.warmup_steps",
	"optimization.disable_kl":                        "optimization.disable_divergence",
	"optimization.use_kl_loss":                       "optimization.use_divergence_loss",
	"optimization.kl_penalty":                        "optimization.divergence_penalty",
	"optimization.kl_coef":                           "optimization.divergence_coef",
	"optimization.kl_type":                           "optimization.divergence_type",
	"optimization.kl_target":                         "optimization.divergence_target",
	"optimization.kl_horizon":                        "optimization.divergence_horizon",
	// verl's names of the same settings.
	"worker.actor.use_dynamic_bsz":                   "worker.actor.dynamic_batching",
	"worker.actor.ppo_max_token_len_per_gpu":         "worker.actor.max_token_len_per_device",
	"worker.actor.model.use_remove_padding":          "worker.actor.padding_free",
	"worker.actor.fsdp.mixed_precision.param_dtype":  "worker.actor.fsdp.mixed_precision_dtype",
	"worker.actor.fsdp.mixed_precision.reduce_dtype": "worker.actor.fsdp.reduce_dtype",
	"worker.actor.fsdp.param_offload":                "worker.actor.offload.offload_params",
	"worker.actor.fsdp.optimizer_offload":            "worker.actor.offload.offload_optimizer",
	"worker.actor.fsdp.enable_cpu_offload":           "worker.actor.fsdp.cpu_offload",
	"training.test_freq":                             "training.val_freq",
	"training.total_training_steps":                  "training.steps",
	"training.default_local_dir":                     "training.run_dir",
	"dataset.train_batch_size":                       "dataset.rollout_batch_size",
	"optimization.kl_ctrl.type":                      "optimization.divergence_type",
	"optimization.kl_ctrl.kl_coef":                   "optimization.divergence_coef",
	"optimization.kl_ctrl.horizon":                   "optimization.divergence_horizon",
	"optimization.kl_ctrl.target_kl":                 "optimization.divergence_target",
	// EasyR1's section names.
	"data.":      "dataset.",
	"trainer.":   "training.",
	"algorithm.": "optimization.",
}

// ignored are keys of the seeds that only make sense for PyTorch / vLLM / Ray (a prefix ending in
// "." covers a whole section), with the reason printed in their one warning.
var ignored = map[string]string{
	"dataset.video_fps":                           "this example's model reads images only",
	"worker.actor.optim.strategy":                 "AdamW in float32",
	"training.save_limit":                         "every checkpoint is kept (nothing is deleted)",
	"worker.actor.ulysses_size":                   "no sequence parallelism",
	"worker.actor.model.peft_type":                "LoRA is on when worker.actor.model.lora_rank > 0 (with model_path)",
	"worker.rollout.enable_prefix_caching":        "the decoder's KV cache is per batch; no vLLM prefix cache",
	"worker.hybrid_engine":                        "one process does rollout and update",
	"worker.actor.strategy":                       "no FSDP / Megatron: one process",
	"worker.actor.fsdp.":                          "no FSDP wrapping or offload (sharding_strategy, mixed_precision_dtype and reduce_dtype are read)",
	"worker.actor.offload.":                       "offload_params and offload_optimizer are read",
	"worker.ref.":                                 "the reference is the frozen warm-started policy, in process",
	"worker.actor.use_torch_compile":              "no PyTorch",
	"worker.actor.ulysses_sequence_parallel_size": "no sequence parallelism",
	"worker.actor.model.trust_remote_code":        "no remote code",
	"worker.rollout.name":                         "sampling is the model's own KV-cached decoder (no vLLM)",
	"worker.rollout.gpu_memory_utilization":       "no vLLM memory pool",
	"worker.rollout.tensor_parallel_size":         "no tensor parallelism",
	"worker.rollout.enforce_eager":                "no CUDA graphs",
	"worker.rollout.enable_chunked_prefill":       "no vLLM scheduler",
	"worker.rollout.max_num_batched_tokens":       "no vLLM scheduler",
	"worker.rollout.dtype":                        "the model runs in float32",
	"worker.rollout.limit_images":                 "one image per prompt",
	"worker.rollout.val_override_config.":         "validation samples one response per prompt (its temperature is read)",
	"worker.rollout.disable_tqdm":                 "see training.progress",
	"worker.reward.reward_fn_path":                "no Python reward functions: the built-in Go reward scores the answer and the think format (worker.reward.accuracy_weight, format_weight)",
	"worker.reward.reward_function":               "no Python reward functions: the built-in Go reward scores the answer and the think format",
	"worker.reward.reward_function_kwargs":        "no Python reward functions",
	"worker.reward.skip_special_tokens":           "special tokens are never decoded into the response text",
	"worker.reward.num_cpus":                      "no Ray",
	"worker.critic.model.":                        "the critic has the actor's sizes (worker.actor.model)",
	"worker.critic.fsdp.":                         "no FSDP: one process",
	"worker.critic.offload.":                      "no CPU offload",
}

// DefaultConfig returns the embedded default configuration.
func DefaultConfig() Config {
	c := Config{}
	if err := c.decodeYAML(defaultYAML, "default.yaml"); err != nil {
		panic("trainer: embedded default.yaml: " + err.Error()) // a build defect, caught by the tests
	}
	c.set, c.setCount, c.warnings = map[string]int{}, 0, nil
	return c
}

// LoadConfig builds a configuration: the embedded defaults, then the YAML file at path (when
// not empty; keys it sets replace the defaults), then the dotted overrides key.path=value in
// order. Unknown keys and invalid values are errors naming the key; PyTorch/vLLM-only keys are
// accepted with one warning each (Warnings).
func LoadConfig(path string, overrides []string) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		if err := c.decodeYAML(data, path); err != nil {
			return c, err
		}
	}
	for _, o := range overrides {
		if err := c.Set(o); err != nil {
			return c, err
		}
	}
	if err := c.resolve(); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Warnings lists the accepted keys that have no effect here, one line each.
func (c Config) Warnings() []string { return c.warnings }

// resolve applies the rules between keys: the budget is training.steps or total_epochs, the one
// given last (a file's total_epochs, then steps on the command line: steps).
func (c *Config) resolve() error {
	se, ss := c.set["training.total_epochs"], c.set["training.steps"]
	switch {
	case se > 0 && ss > 0 && c.Training.TotalEpochs > 0 && c.Training.Steps > 0:
		if ss > se {
			c.warnings = append(c.warnings, fmt.Sprintf("config: training.steps=%d given after training.total_epochs=%d: the budget is %d steps", c.Training.Steps, c.Training.TotalEpochs, c.Training.Steps))
			c.Training.TotalEpochs = 0
		} else {
			c.warnings = append(c.warnings, fmt.Sprintf("config: training.total_epochs=%d given after training.steps=%d: the budget is %d epochs", c.Training.TotalEpochs, c.Training.Steps, c.Training.TotalEpochs))
			c.Training.Steps = 0
		}
	case se > 0 && ss == 0 && c.Training.TotalEpochs > 0:
		c.Training.Steps = 0 // derived from the data size (Trainer.steps)
	}
	// The planted answer-A bias is part of the generated task: a user's own references are
	// never rewritten. The default's fraction is dropped with dataset.train_files; one given
	// explicitly is an error (Validate).
	if (c.Dataset.TrainFiles != "" || c.Dataset.Task != vqa.ShortChain) && c.set["training.sft_shortcut"] == 0 {
		c.Training.SFTShortcut = 0
	}
	c.resolveModelPath()
	c.warnOffload()
	if f := c.Worker.Actor.FSDP.ShardingStrategy; shardingStrategies[f].more != "" {
		c.warnings = append(c.warnings, fmt.Sprintf("config: worker.actor.fsdp.sharding_strategy=%s runs as SHARD_GRAD_OP (ZeRO-2): the AdamW moments and gradients are sharded over all the ranks, the parameters stay whole on every rank (this model runs whole, not layer by layer); %s", f, shardingStrategies[f].more))
	}
	// The model has a fixed patch grid: every image is fitted to image_size² pixels, which the
	// pixel bounds (Qwen2-VL's processor settings) can only check.
	d := c.Dataset
	if px := d.ImageSize * d.ImageSize; (d.MinPixels > 0 && px < d.MinPixels) || (d.MaxPixels > 0 && px > d.MaxPixels) {
		c.warnings = append(c.warnings, fmt.Sprintf("config: dataset.min_pixels/max_pixels [%d, %d]: the model's input is dataset.image_size^2 = %d pixels, outside them; images are fitted to it all the same (set dataset.image_size to change it)",
			d.MinPixels, d.MaxPixels, px))
	}
	return nil
}

// decodeYAML applies every key of the YAML document data over c.
func (c *Config) decodeYAML(data []byte, name string) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config: %s: %w", name, err)
	}
	if len(root.Content) == 0 {
		return nil // empty document
	}
	n := root.Content[0]
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("config: %s line %d: want a mapping of sections", name, n.Line)
	}
	return c.applyMapping(n, "", fmt.Sprintf("%s line %%d", name))
}

// applyMapping sets every leaf under the mapping n whose keys start at prefix; where names the
// source ("file line %d").
func (c *Config) applyMapping(n *yaml.Node, prefix, where string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := prefix + k.Value
		loc := fmt.Sprintf(where, k.Line)
		if c.ignore(key, loc) {
			continue
		}
		canon := canonical(key)
		f, ok := fieldAt(canon)
		if !ok {
			if aliasSection(canon) && v.Kind == yaml.MappingNode {
				if err := c.applyMapping(v, key+".", where); err != nil {
					return err
				}
				continue
			}
			return unknownKey(key, loc)
		}
		if f.Kind() == reflect.Struct {
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				continue
			}
			if v.Kind != yaml.MappingNode {
				return keyErr(key, "%s: is a section, want a mapping of keys", loc)
			}
			if err := c.applyMapping(v, key+".", where); err != nil {
				return err
			}
			continue
		}
		if err := c.setLeaf(canon, v, key, loc); err != nil {
			return err
		}
	}
	return nil
}

// Set applies one override "key.path=value"; the value is parsed as YAML into the key's type.
func (c *Config) Set(override string) error {
	key, val, ok := strings.Cut(override, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("config: override %q: want key.path=value", override)
	}
	loc := "override " + override
	if c.ignore(key, loc) {
		return nil
	}
	canon := canonical(key)
	f, ok := fieldAt(canon)
	if !ok {
		return unknownKey(key, loc)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(val), &doc); err != nil {
		return keyErr(key, "value %q: %v", val, err)
	}
	v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	if len(doc.Content) > 0 {
		v = doc.Content[0]
	}
	if f.Kind() == reflect.Struct {
		if v.Kind != yaml.MappingNode {
			return keyErr(key, "is a section; set one of its keys (%s)", strings.Join(tagsOf(f), ", "))
		}
		return c.applyMapping(v, key+".", loc+" (line %d)")
	}
	return c.setLeaf(canon, v, key, loc)
}

// setLeaf decodes v into the field at canon. Integer keys take integral numbers only, and no key
// but a string one takes an empty value: yaml.v3 would truncate 2.5 to 2 and 5e-7 to 0.
func (c *Config) setLeaf(canon string, v *yaml.Node, key, loc string) error {
	dst := fieldValue(reflect.ValueOf(c).Elem(), canon)
	kind := dst.Kind()
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		if kind != reflect.String {
			return keyErr(key, "%s: empty value, want a %s", loc, kindName(dst.Type()))
		}
		dst.SetString("")
		c.mark(canon)
		return nil
	}
	// Named types parse themselves.
	_, custom := dst.Addr().Interface().(yaml.Unmarshaler)
	if _, ok := dst.Addr().Interface().(encoding.TextUnmarshaler); ok {
		custom = true
	}
	switch {
	case !custom && (kind == reflect.Int || kind == reflect.Int64 || kind == reflect.Uint64):
		if v.Kind != yaml.ScalarNode {
			return keyErr(key, "%s: want an integer", loc)
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64)
		if err != nil || (v.Tag != "!!int" && v.Tag != "!!float") {
			return keyErr(key, "%s: value %q is not an integer", loc, v.Value)
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return keyErr(key, "%s: value %q is not an integer (no truncation)", loc, v.Value)
		}
		if kind == reflect.Uint64 {
			if f < 0 {
				return keyErr(key, "%s: value %q is negative, want >= 0", loc, v.Value)
			}
			dst.SetUint(uint64(f))
		} else {
			dst.SetInt(int64(f))
		}
	default:
		p := reflect.New(dst.Type())
		if err := v.Decode(p.Interface()); err != nil {
			return keyErr(key, "%s: value %q: %v", loc, v.Value, err)
		}
		dst.Set(p.Elem())
	}
	c.mark(canon)
	return nil
}

func (c *Config) mark(canon string) {
	if c.set == nil {
		c.set = map[string]int{}
	}
	c.setCount++
	c.set[canon] = c.setCount
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		return "list"
	}
	return t.Kind().String()
}

// ignore reports whether key is a PyTorch/vLLM-only key and records its warning once.
func (c *Config) ignore(key, loc string) bool {
	canon := canonical(key)
	if _, ok := fieldAt(canon); ok { // a key of an ignored section that is read (fsdp.sharding_strategy)
		return false
	}
	for k, why := range ignored {
		if canon == strings.TrimSuffix(k, ".") || (strings.HasSuffix(k, ".") && strings.HasPrefix(canon, k)) {
			msg := fmt.Sprintf("config: %s (%s): accepted and ignored: %s", key, loc, why)
			for _, w := range c.warnings {
				if strings.HasPrefix(w, "config: "+key+" ") {
					return true
				}
			}
			c.warnings = append(c.warnings, msg)
			return true
		}
	}
	return false
}

// canonical maps an alias to its key here.
func canonical(key string) string {
	if to, ok := aliases[key]; ok {
		return to
	}
	for from, to := range aliases {
		if strings.HasSuffix(from, ".") && strings.HasPrefix(key, from) {
			return canonical(to + strings.TrimPrefix(key, from))
		}
	}
	return key
}

// fieldAt returns the type of the field at the dotted path key.
func fieldAt(key string) (reflect.Type, bool) {
	t := reflect.TypeOf(Config{})
	for _, part := range strings.Split(key, ".") {
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		f, ok := fieldByTag(t, part)
		if !ok {
			return nil, false
		}
		t = f.Type
	}
	return t, true
}

// aliasSection reports whether key is a mapping of other names only (EasyR1's "algorithm",
// verl's "algorithm.kl_ctrl"): its keys are resolved one by one.
func aliasSection(key string) bool {
	for from := range aliases {
		if strings.HasPrefix(from, key+".") {
			return true
		}
	}
	return false
}

func fieldValue(v reflect.Value, key string) reflect.Value {
	for _, part := range strings.Split(key, ".") {
		f, _ := fieldByTag(v.Type(), part)
		v = v.FieldByIndex(f.Index)
	}
	return v
}

// knownKeys lists every leaf key path, the aliases and the ignored keys (for suggestions).
func knownKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		keys, fields := yamlFields(t)
		for i, k := range keys {
			if fields[i].Type.Kind() == reflect.Struct {
				walk(fields[i].Type, prefix+k+".")
				continue
			}
			out = append(out, prefix+k)
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	for k := range aliases {
		if !strings.HasSuffix(k, ".") {
			out = append(out, k)
		}
	}
	for k := range ignored {
		out = append(out, strings.TrimSuffix(k, "."))
	}
	sort.Strings(out)
	return out
}

// unknownKey is the error of a key that is nowhere, with the nearest known key.
func unknownKey(key, loc string) error {
	best, bestD := "", math.MaxInt
	last := key[strings.LastIndex(key, ".")+1:]
	keys := knownKeys()
	if len(key) > 200 { // no key is that long: no suggestion (the edit distance is quadratic)
		keys = nil
	}
	for _, k := range keys {
		// The whole path counts, and the last part alone (a key put in the wrong section).
		d := levenshtein(key, k)
		if kl := k[strings.LastIndex(k, ".")+1:]; kl == last {
			d = min(d, 1)
		} else {
			d = min(d, levenshtein(last, kl)+2)
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	msg := fmt.Sprintf("%s: unknown key", loc)
	if best != "" && bestD <= max(3, len(last)/2) {
		msg += fmt.Sprintf(`; did you mean "%s"?`, best)
	}
	return keyErr(key, "%s", msg)
}

// levenshtein is the edit distance of a and b (bytes); hand-written as it is ten lines.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// yamlFields lists the keys of struct type t with their fields, descending into fields tagged
// ",inline" (their Index is then the full path from t); unexported fields are skipped.
func yamlFields(t reflect.Type) (keys []string, fields []reflect.StructField) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opts == "inline" && f.Type.Kind() == reflect.Struct {
			ik, ifs := yamlFields(f.Type)
			for j := range ifs {
				ifs[j].Index = append([]int{i}, ifs[j].Index...)
			}
			keys, fields = append(keys, ik...), append(fields, ifs...)
			continue
		}
		keys, fields = append(keys, key), append(fields, f)
	}
	return keys, fields
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	keys, fields := yamlFields(t)
	for i, k := range keys {
		if k == tag {
			return fields[i], true
		}
	}
	return reflect.StructField{}, false
}

func tagsOf(t reflect.Type) []string {
	keys, _ := yamlFields(t)
	return keys
}

// Validate checks every value and names the first bad key.
func (c Config) Validate() error {
	d, t, o, a, r := c.Dataset, c.Training, c.Optimization, c.Worker.Actor, c.Worker.Rollout
	pos := func(key string, v int) error {
		if v <= 0 {
			return keyErr(key, "is %d, want > 0", v)
		}
		return nil
	}
	nonneg := func(key string, v int) error {
		if v < 0 {
			return keyErr(key, "is %d, want >= 0", v)
		}
		return nil
	}
	finite := func(key string, v, lo, hi float64) error {
		if math.IsNaN(v) || v < lo || v > hi {
			return keyErr(key, "is %v, want a value in [%v, %v]", v, lo, hi)
		}
		return nil
	}
	checks := []error{
		nonneg("dataset.train_size", d.TrainSize),
		nonneg("dataset.val_size", d.ValSize),
		pos("dataset.image_size", d.ImageSize),
		pos("dataset.max_shapes", d.MaxShapes),
		pos("dataset.rollout_batch_size", d.RolloutBatchSize),
		pos("dataset.max_prompt_length", d.MaxPromptLength),
		pos("dataset.max_response_length", d.MaxResponseLength),
		nonneg("dataset.min_pixels", d.MinPixels),
		nonneg("dataset.max_pixels", d.MaxPixels),
		nonneg("training.steps", t.Steps),
		nonneg("training.total_epochs", t.TotalEpochs),
		nonneg("training.sft_steps", t.SFTSteps),
		pos("training.sft_batch_size", t.SFTBatchSize),
		finite("training.sft_lr", t.SFTLR, 0, 10),
		finite("training.sft_shortcut", t.SFTShortcut, 0, 1),
		nonneg("training.sft_shortcut_steps", t.SFTShortcutSteps),
		nonneg("training.sft_save_freq", t.SFTSaveFreq),
		nonneg("training.nnodes", t.Nnodes),
		nonneg("training.n_gpus_per_node", t.NGPUsPerNode),
		finite("optimization.gamma", o.Gamma, 0, 1),
		finite("optimization.lam", o.Lam, 0, 1),
		nonneg("training.val_freq", t.ValFreq),
		nonneg("training.save_freq", t.SaveFreq),
		nonneg("training.rollout_samples", t.RolloutSamples),
		nonneg("training.rollout_log_freq", t.RolloutLogFreq),
		finite("optimization.divergence_coef", o.DivergenceCoef, 0, math.MaxFloat64),
		finite("optimization.entropy_penalty_coef", o.EntropyPenaltyCoef, -math.MaxFloat64, math.MaxFloat64),
		finite("optimization.filter_low", o.FilterLow, -math.MaxFloat64, math.MaxFloat64),
		finite("optimization.filter_high", o.FilterHigh, o.FilterLow, math.MaxFloat64),
		pos("optimization.patch_size", o.PatchSize),
		finite("optimization.black_prob", o.BlackProb, 0, 1),
		finite("optimization.noise_std", o.NoiseStd, 0, math.MaxFloat64),
		finite("optimization.blur_radius", o.BlurRadius, 0, 100),
		pos("worker.actor.global_batch_size", a.GlobalBatchSize),
		pos("worker.actor.micro_batch_size_per_device_for_update", a.MicroBatchSizePerDeviceForUpdate),
		pos("worker.actor.micro_batch_size_per_device_for_experience", a.MicroBatchSizePerDeviceForExperience),
		pos("worker.actor.ppo_epochs", a.PPOEpochs),
		finite("worker.actor.clip_ratio_low", a.ClipRatioLow, 0, 1),
		finite("worker.actor.clip_ratio_high", a.ClipRatioHigh, 0, math.Inf(1)),
		finite("worker.actor.clip_ratio_dual", a.ClipRatioDual, 1+1e-12, math.Inf(1)),
		finite("worker.actor.max_grad_norm", a.MaxGradNorm, 0, math.Inf(1)),
		pos("worker.actor.model.patch_size", a.Model.PatchSize),
		pos("worker.actor.model.dim", a.Model.Dim),
		pos("worker.actor.model.layers", a.Model.Layers),
		pos("worker.actor.model.heads", a.Model.Heads),
		pos("worker.actor.model.mlp_dim", a.Model.MLPDim),
		finite("worker.critic.cliprange_value", c.Worker.Critic.CliprangeValue, 0, math.Inf(1)),
		pos("worker.rollout.n", r.N),
		finite("worker.rollout.temperature", r.Temperature, 1e-6, 100),
		finite("worker.rollout.top_p", r.TopP, 1e-6, 1),
		finite("worker.rollout.val_temperature", r.ValTemperature, 0, 100),
		finite("worker.reward.accuracy_weight", c.Worker.Reward.AccuracyWeight, 0, math.MaxFloat64),
		finite("worker.reward.format_weight", c.Worker.Reward.FormatWeight, 0, math.MaxFloat64),
		finite("worker.reward.mdi_weight", c.Worker.Reward.MDIWeight, 0, math.MaxFloat64),
		finite("worker.reward.mdi_balance_ratio", c.Worker.Reward.MDIBalanceRatio, 1+1e-9, math.MaxFloat64),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	for _, sec := range []struct {
		key string
		o   OptimConfig
	}{{"worker.actor.optim", a.Optim}, {"worker.critic.optim", c.Worker.Critic.Optim}} {
		if err := sec.o.validate(sec.key); err != nil {
			return err
		}
	}
	if rw := c.Worker.Reward; rw.AccuracyWeight+rw.FormatWeight <= 0 {
		return keyErr("worker.reward.accuracy_weight", "and format_weight are both 0: no answer reward")
	}
	if d.ValBatchSize == 0 || d.ValBatchSize < -1 {
		return keyErr("dataset.val_batch_size", "is %d, want > 0 or -1 (the whole set)", d.ValBatchSize)
	}
	if d.Options < 2 || d.Options > 10 {
		return keyErr("dataset.options", "is %d, want 2..10 (letters A..J)", d.Options)
	}
	if d.TrainFiles != "" && t.SFTShortcut > 0 {
		return keyErr("training.sft_shortcut", "is %v with dataset.train_files set: it would rewrite that fraction of your warm-start references to answer A; the planted bias is for the generated task only: set training.sft_shortcut=0", t.SFTShortcut)
	}
	if d.TrainFiles == "" && d.Task != vqa.ShortChain && (t.SFTShortcut > 0 || t.SFTBlind) {
		return keyErr("training.sft_shortcut", "is %v (sft_blind %v) with dataset.task=%v: the planted bias and blind references rewrite the short chain only", t.SFTShortcut, t.SFTBlind, d.Task)
	}
	if d.TrainFiles == "" && d.TrainSize == 0 {
		return keyErr("dataset.train_size", "is 0 and dataset.train_files is empty: no training data")
	}
	if d.TrainFiles == "" && d.TrainSize < d.RolloutBatchSize {
		return keyErr("dataset.train_size", "is %d, want >= dataset.rollout_batch_size (%d)", d.TrainSize, d.RolloutBatchSize)
	}
	if t.Steps == 0 && t.TotalEpochs == 0 && !t.ValOnly {
		return keyErr("training.steps", "and training.total_epochs are 0: no budget (set one, or training.val_only=true)")
	}
	if d.RolloutBatchSize%a.GlobalBatchSize != 0 {
		return keyErr("worker.actor.global_batch_size", "is %d, want a divisor of dataset.rollout_batch_size (%d)", a.GlobalBatchSize, d.RolloutBatchSize)
	}
	if rows := a.GlobalBatchSize * r.N; rows%a.MicroBatchSizePerDeviceForUpdate != 0 {
		return keyErr("worker.actor.micro_batch_size_per_device_for_update", "is %d, want a divisor of the mini-batch rows global_batch_size*rollout.n = %d", a.MicroBatchSizePerDeviceForUpdate, rows)
	}
	if a.Device != "" && a.Device != "cpu" && a.Device != "cuda" {
		return keyErr("worker.actor.device", "is %q, want cpu or cuda", a.Device)
	}
	switch a.GradReduce {
	case "ordered", "bucketed":
	default:
		return keyErr("worker.actor.grad_reduce", "is %q, want ordered or bucketed", a.GradReduce)
	}
	if !(a.GradBucketMB > 0 && a.GradBucketMB <= 1<<20) {
		return keyErr("worker.actor.grad_bucket_mb", "is %v, want a size in MiB in (0, 1048576]", a.GradBucketMB)
	}
	stage, err := a.FSDP.Sharding()
	if err != nil {
		return err
	}
	if err := a.validateScale(); err != nil {
		return err
	}
	if err := a.validateOffload(); err != nil {
		return err
	}
	if a.Device == "cuda" && stage != 0 && !a.offloadOptimizer() && a.Model.ModelPath == "" {
		return keyErr("worker.actor.device", "is cuda: the built-in model's optimizer state on the device is whole; fsdp.sharding_strategy=%s runs on the host (device=cpu, or offload.offload_optimizer=true: the sharded state in host memory; a model_path model shards it on the devices)", a.FSDP.ShardingStrategy)
	}
	if w := max(1, t.Nnodes) * max(1, t.NGPUsPerNode); w > 1 {
		// Each rank takes whole prompt groups of every mini-batch, in whole micro-batches.
		if a.GlobalBatchSize%w != 0 {
			return keyErr("worker.actor.global_batch_size", "is %d, want a multiple of the %d ranks (training.nnodes x n_gpus_per_node): each rank takes whole prompt groups of a mini-batch", a.GlobalBatchSize, w)
		}
		if rows := a.GlobalBatchSize / w * r.N; rows%a.MicroBatchSizePerDeviceForUpdate != 0 {
			return keyErr("worker.actor.micro_batch_size_per_device_for_update", "is %d, want a divisor of the rows per rank of a mini-batch global_batch_size/%d ranks*rollout.n = %d", a.MicroBatchSizePerDeviceForUpdate, w, rows)
		}
	}
	if a.Model.Dim%a.Model.Heads != 0 {
		return keyErr("worker.actor.model.heads", "is %d, want a divisor of worker.actor.model.dim (%d)", a.Model.Heads, a.Model.Dim)
	}
	if d.ImageSize%a.Model.PatchSize != 0 {
		return keyErr("worker.actor.model.patch_size", "is %d, want a divisor of dataset.image_size (%d)", a.Model.PatchSize, d.ImageSize)
	}
	if t.FindLastCheckpoint && t.RunDir == "" && t.ExperimentName == "" && t.LoadCheckpointPath == "" {
		return keyErr("training.find_last_checkpoint", "is true but training.run_dir, experiment_name and load_checkpoint_path are empty: name the run directory to resume")
	}
	if t.ValOnly && t.LoadCheckpointPath == "" && !t.FindLastCheckpoint && a.Model.ModelPath == "" {
		return keyErr("training.val_only", "is true but neither training.load_checkpoint_path nor training.find_last_checkpoint names the weights to validate")
	}
	for _, l := range t.Logger {
		switch l {
		case "console", "jsonl", "tensorboard":
		case "wandb", "swanlab", "mlflow", "file":
			// Warned about in Run (the remote services are not reachable from Go here).
		default:
			return keyErr("training.logger", "unknown logger %q (want console, jsonl, tensorboard or a list of them)", l)
		}
	}
	if _, err := c.Controller(); err != nil {
		return err
	}
	if !o.DisableDivergence && o.DivergencePenalty == divergence.Full {
		// Full is the exact KL summed over the vocabulary: it needs the policy's and the
		// reference's whole log-distributions [B, T, V], and the step keeps only the sampled
		// tokens' log-probs [B, T].
		return keyErr("optimization.divergence_penalty", "full (the exact KL over the vocabulary) needs [B, T, V] log-distributions, and this trainer keeps the sampled tokens' log-probs [B, T]: use kl, abs, mse or low_var_kl (or optimization.disable_divergence=true)")
	}
	switch o.FilterKey {
	case "overall", "accuracy", "format":
	default:
		return keyErr("optimization.filter_key", "is %q, want overall, accuracy or format (the reward's parts)", o.FilterKey)
	}
	switch c.Worker.Reward.RewardType {
	case "function", "":
	default:
		return keyErr("worker.reward.reward_type", "is %q, want function (the built-in rule reward)", c.Worker.Reward.RewardType)
	}
	if err := o.Config.Validate(); err != nil {
		var e *tensor.Error
		if errors.As(err, &e) { // tprl names the YAML key of its own section
			return keyErr("optimization."+e.Arg, "%s", e.Detail)
		}
		return err
	}
	if _, err := c.Perturbation(); err != nil {
		return err
	}
	if _, err := c.Update(); err != nil {
		return err
	}
	return nil
}

func (o OptimConfig) validate(key string) error {
	if math.IsNaN(o.LR) || o.LR < 0 || o.LR > 10 {
		return keyErr(key+".lr", "is %v, want a value in [0, 10]", o.LR)
	}
	if math.IsNaN(o.Eps) || o.Eps < 0 || o.Eps > 1 {
		return keyErr(key+".eps", "is %v, want a value in [0, 1]", o.Eps)
	}
	if math.IsNaN(o.WeightDecay) || o.WeightDecay < 0 || o.WeightDecay > 10 {
		return keyErr(key+".weight_decay", "is %v, want a value in [0, 10]", o.WeightDecay)
	}
	if o.WarmupSteps < 0 {
		return keyErr(key+".warmup_steps", "is %d, want >= 0", o.WarmupSteps)
	}
	if math.IsNaN(o.LRWarmupRatio) || o.LRWarmupRatio < 0 || o.LRWarmupRatio > 1 {
		return keyErr(key+".lr_warmup_ratio", "is %v, want a value in [0, 1]", o.LRWarmupRatio)
	}
	if math.IsNaN(o.MinLRRatio) || o.MinLRRatio < 0 || o.MinLRRatio > 1 {
		return keyErr(key+".min_lr_ratio", "is %v, want a value in [0, 1]", o.MinLRRatio)
	}
	if _, err := loop.ParseScheduleKind(o.LRSchedulerType); err != nil {
		return keyErr(key+".lr_scheduler_type", "%v", err)
	}
	if len(o.Betas) != 2 || !(o.Betas[0] >= 0 && o.Betas[0] < 1) || !(o.Betas[1] >= 0 && o.Betas[1] < 1) {
		return keyErr(key+".betas", "is %v, want two values in [0, 1)", o.Betas)
	}
	return nil
}

// Tokens is the token-perception configuration (the optimization section's tprl keys).
func (c Config) Tokens() tprl.Config { return c.Optimization.Config }

// DivergenceInLoss and DivergenceInReward say where the divergence to the reference goes.
func (c Config) DivergenceInLoss() bool {
	return !c.Optimization.DisableDivergence && c.Optimization.UseDivergenceLoss
}

func (c Config) DivergenceInReward() bool {
	return !c.Optimization.DisableDivergence && !c.Optimization.UseDivergenceLoss
}

// ControllerConfig is the divergence coefficient controller of the reward (fixed or adaptive).
func (c Config) ControllerConfig() divergence.ControllerConfig {
	o := c.Optimization
	return divergence.ControllerConfig{Type: o.DivergenceType, Coef: o.DivergenceCoef, Target: o.DivergenceTarget, Horizon: o.DivergenceHorizon}
}

// Controller builds the controller of ControllerConfig.
func (c Config) Controller() (divergence.Controller, error) {
	o := c.Optimization
	ctl, err := divergence.NewController(c.ControllerConfig())
	if err != nil {
		return nil, keyErr("optimization.divergence_type", "%s with divergence_target %v, divergence_horizon %v: %v", o.DivergenceType, o.DivergenceTarget, o.DivergenceHorizon, err)
	}
	return ctl, nil
}

// Update maps the actor and optimization sections onto tprl.UpdateConfig.
func (c Config) Update() (tprl.UpdateConfig, error) {
	a, o := c.Worker.Actor, c.Optimization
	pol := ppo.DefaultPolicyConfig(a.LossType)
	pol.ClipLow, pol.ClipHigh, pol.ClipDual = a.ClipRatioLow, a.ClipRatioHigh, a.ClipRatioDual
	pol.Agg = ppo.Agg{Mode: a.LossAvgMode, Horizon: c.Dataset.MaxResponseLength}
	u := tprl.UpdateConfig{Tokens: c.Tokens(), Policy: pol}
	if c.DivergenceInLoss() {
		u.KLLoss = &ppo.KLConfig{Kind: o.DivergencePenalty, Coef: o.DivergenceCoef}
	}
	if o.UseEntropyPenalty {
		u.EntropyPenalty = &ppo.EntropyConfig{Coef: o.EntropyPenaltyCoef}
	}
	if err := u.Validate(); err != nil {
		return u, fmt.Errorf("config: worker.actor / optimization: %w", err)
	}
	return u, nil
}

// Advantage maps optimization.advantage_estimator, gamma and lam onto advantage.Config.
func (c Config) Advantage() (advantage.Config, error) {
	ac := advantage.DefaultConfig()
	ac.Estimator, ac.Gamma, ac.Lambda = c.Optimization.AdvantageEstimator, c.Optimization.Gamma, c.Optimization.Lam
	return ac, ac.Validate()
}

// Perturbation builds the image perturbation of optimization.perturbation.
func (c Config) Perturbation() (perturb.Perturbation, error) {
	o := c.Optimization
	var (
		p   perturb.Perturbation
		err error
	)
	switch k := o.Perturbation; k {
	case perturb.PatchBlackening:
		p = perturb.Blackening{PatchSize: o.PatchSize, Prob: o.BlackProb}
	case perturb.GaussianNoise:
		p = perturb.Noise{Std: o.NoiseStd}
	case perturb.GaussianBlur:
		p = perturb.Blur{Radius: o.BlurRadius}
	default:
		p, err = perturb.Default(k)
		if err != nil {
			return nil, keyErr("optimization.perturbation", "%v", err)
		}
	}
	if err := p.Validate(); err != nil {
		return nil, keyErr("optimization."+o.Perturbation.String(), "%v", err)
	}
	return p, nil
}

// YAML renders the configuration (stored with every checkpoint and in the run directory).
func (c Config) YAML() []byte {
	b, err := yaml.Marshal(c)
	if err != nil {
		return []byte("# " + err.Error() + "\n")
	}
	return b
}

// leaves lists every leaf key with its value, for comparing two configurations.
func (c Config) leaves() map[string]any {
	out := map[string]any{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		keys, fields := yamlFields(v.Type())
		for i, k := range keys {
			fv := v.FieldByIndex(fields[i].Index)
			if fv.Kind() == reflect.Struct {
				walk(fv, prefix+k+".")
				continue
			}
			out[prefix+k] = fv.Interface()
		}
	}
	walk(reflect.ValueOf(c), "")
	return out
}
