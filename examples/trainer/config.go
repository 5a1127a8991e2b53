package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

//go:embed default.yaml
var defaultYAML []byte

// Config is the trainer's configuration, with the seeds' section and key names.
type Config struct {
	Dataset      DatasetConfig      `yaml:"dataset" json:"dataset"`
	Training     TrainingConfig     `yaml:"training" json:"training"`
	Optimization OptimizationConfig `yaml:"optimization" json:"optimization"`
	Worker       WorkerConfig       `yaml:"worker" json:"worker"`
}

// DatasetConfig selects the data: files, or a task generated in memory.
type DatasetConfig struct {
	TrainFiles       string `yaml:"train_files" json:"train_files"`
	ValFiles         string `yaml:"val_files" json:"val_files"`
	TrainSize        int    `yaml:"train_size" json:"train_size"`
	ValSize          int    `yaml:"val_size" json:"val_size"`
	Seed             uint64 `yaml:"seed" json:"seed"`
	ImageSize        int    `yaml:"image_size" json:"image_size"`
	MaxShapes        int    `yaml:"max_shapes" json:"max_shapes"`
	Options          int    `yaml:"options" json:"options"`
	RolloutBatchSize int    `yaml:"rollout_batch_size" json:"rollout_batch_size"`
	Shuffle          bool   `yaml:"shuffle" json:"shuffle"`
}

// TrainingConfig is the loop: steps, warm start, validation, checkpoints, outputs.
type TrainingConfig struct {
	Seed               uint64  `yaml:"seed" json:"seed"`
	Steps              int     `yaml:"steps" json:"steps"`
	SFTSteps           int     `yaml:"sft_steps" json:"sft_steps"`
	SFTBatchSize       int     `yaml:"sft_batch_size" json:"sft_batch_size"`
	SFTLR              float64 `yaml:"sft_lr" json:"sft_lr"`
	AdvEstimator       string  `yaml:"adv_estimator" json:"adv_estimator"`
	Gamma              float64 `yaml:"gamma" json:"gamma"`
	Lam                float64 `yaml:"lam" json:"lam"`
	ValFreq            int     `yaml:"val_freq" json:"val_freq"`
	ValBeforeTrain     bool    `yaml:"val_before_train" json:"val_before_train"`
	SaveFreq           int     `yaml:"save_freq" json:"save_freq"`
	RunDir             string  `yaml:"run_dir" json:"run_dir"`
	FindLastCheckpoint bool    `yaml:"find_last_checkpoint" json:"find_last_checkpoint"`
	RolloutSamples     int     `yaml:"rollout_samples" json:"rollout_samples"`
	RolloutLogFreq     int     `yaml:"rollout_log_freq" json:"rollout_log_freq"`
	Progress           bool    `yaml:"progress" json:"progress"`
}

// OptimizationConfig is the token-perception part and the image perturbation. The
// token-perception keys (enable_perception_filtering, top_p_perception_tokens,
// enable_entropy_filtering, top_p_entropy_tokens, enable_trajectory_reweighting,
// trajectory_scaling_min, trajectory_shaping_scope, shaping_requires_perception) are tprl.Config's
// own, inlined, so the library's tags, defaults and validation apply unchanged.
type OptimizationConfig struct {
	tprl.Config  `yaml:",inline"`
	Perturbation string  `yaml:"perturbation" json:"perturbation"`
	PatchSize    int     `yaml:"patch_size" json:"patch_size"`
	BlackProb    float64 `yaml:"black_prob" json:"black_prob"`
	NoiseStd     float64 `yaml:"noise_std" json:"noise_std"`
	BlurRadius   float64 `yaml:"blur_radius" json:"blur_radius"`
}

// WorkerConfig holds the actor (policy, optimizer, model) and the rollout settings.
type WorkerConfig struct {
	Actor   ActorConfig   `yaml:"actor" json:"actor"`
	Rollout RolloutConfig `yaml:"rollout" json:"rollout"`
}

// ActorConfig is the PPO update and its optimizer.
type ActorConfig struct {
	GlobalBatchSize                      int         `yaml:"global_batch_size" json:"global_batch_size"`
	MicroBatchSizePerDeviceForUpdate     int         `yaml:"micro_batch_size_per_device_for_update" json:"micro_batch_size_per_device_for_update"`
	MicroBatchSizePerDeviceForExperience int         `yaml:"micro_batch_size_per_device_for_experience" json:"micro_batch_size_per_device_for_experience"`
	PPOEpochs                            int         `yaml:"ppo_epochs" json:"ppo_epochs"`
	LossType                             string      `yaml:"loss_type" json:"loss_type"`
	LossAvgMode                          string      `yaml:"loss_avg_mode" json:"loss_avg_mode"`
	ClipRatioLow                         float64     `yaml:"clip_ratio_low" json:"clip_ratio_low"`
	ClipRatioHigh                        float64     `yaml:"clip_ratio_high" json:"clip_ratio_high"`
	ClipRatioDual                        float64     `yaml:"clip_ratio_dual" json:"clip_ratio_dual"`
	MaxGradNorm                          float64     `yaml:"max_grad_norm" json:"max_grad_norm"`
	UseKLLoss                            bool        `yaml:"use_kl_loss" json:"use_kl_loss"`
	KLPenalty                            string      `yaml:"kl_penalty" json:"kl_penalty"`
	KLCoef                               float64     `yaml:"kl_coef" json:"kl_coef"`
	UseEntropyPenalty                    bool        `yaml:"use_entropy_penalty" json:"use_entropy_penalty"`
	EntropyPenaltyCoef                   float64     `yaml:"entropy_penalty_coef" json:"entropy_penalty_coef"`
	Optim                                OptimConfig `yaml:"optim" json:"optim"`
	Model                                ModelConfig `yaml:"model" json:"model"`
}

// OptimConfig is AdamW.
type OptimConfig struct {
	LR          float64   `yaml:"lr" json:"lr"`
	Betas       []float64 `yaml:"betas" json:"betas"`
	Eps         float64   `yaml:"eps" json:"eps"`
	WeightDecay float64   `yaml:"weight_decay" json:"weight_decay"`
}

// ModelConfig sizes the policy (a small vision-language transformer).
type ModelConfig struct {
	PatchSize int    `yaml:"patch_size" json:"patch_size"`
	Dim       int    `yaml:"dim" json:"dim"`
	Layers    int    `yaml:"layers" json:"layers"`
	Heads     int    `yaml:"heads" json:"heads"`
	MLPDim    int    `yaml:"mlp_dim" json:"mlp_dim"`
	Seed      uint64 `yaml:"seed" json:"seed"`
}

// RolloutConfig is sampling.
type RolloutConfig struct {
	N                 int     `yaml:"n" json:"n"`
	Temperature       float64 `yaml:"temperature" json:"temperature"`
	TopP              float64 `yaml:"top_p" json:"top_p"`
	MaxResponseLength int     `yaml:"max_response_length" json:"max_response_length"`
	ValTemperature    float64 `yaml:"val_temperature" json:"val_temperature"`
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

// DefaultConfig returns the embedded default configuration.
func DefaultConfig() Config {
	var c Config
	if err := decodeYAML(&c, defaultYAML, "default.yaml"); err != nil {
		panic("trainer: embedded default.yaml: " + err.Error()) // a build defect, caught by the tests
	}
	return c
}

// LoadConfig builds a configuration: the embedded defaults, then the YAML file at path (when
// not empty; keys it sets replace the defaults), then the dotted overrides key.path=value in
// order. Unknown keys and invalid values are errors naming the key.
func LoadConfig(path string, overrides []string) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		if err := decodeYAML(&c, data, path); err != nil {
			return c, err
		}
	}
	for _, o := range overrides {
		if err := c.Set(o); err != nil {
			return c, err
		}
	}
	return c, c.Validate()
}

// decodeYAML checks every key of data against Config's fields, then decodes data over c.
func decodeYAML(c *Config, data []byte, name string) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config: %s: %w", name, err)
	}
	if len(root.Content) == 0 {
		return nil // empty document
	}
	if err := checkKeys(root.Content[0], reflect.TypeOf(*c), "", name); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("config: %s: %w", name, err)
	}
	return nil
}

// checkKeys walks a mapping node alongside a struct type and reports the first key that has
// no field, by its dotted path and line.
func checkKeys(n *yaml.Node, t reflect.Type, prefix, name string) error {
	if t.Kind() != reflect.Struct {
		// A leaf: decode it alone so that a type error names its key.
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return keyErr(strings.TrimSuffix(prefix, "."), "%s line %d: %v", name, n.Line, err)
		}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil
		}
		return keyErr(strings.TrimSuffix(prefix, "."), "%s line %d: want a mapping of keys", name, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := fieldByTag(t, k.Value)
		if !ok {
			return keyErr(prefix+k.Value, "%s line %d: unknown key (known keys: %s)", name, k.Line, strings.Join(tagsOf(t), ", "))
		}
		if err := checkKeys(v, f.Type, prefix+k.Value+".", name); err != nil {
			return err
		}
	}
	return nil
}

// yamlFields lists the keys of struct type t with their fields, descending into fields tagged
// ",inline" (their Index is then the full path from t).
func yamlFields(t reflect.Type) (keys []string, fields []reflect.StructField) {
	for i := range t.NumField() {
		f := t.Field(i)
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

// Set applies one override "key.path=value"; the value is parsed as YAML into the key's type.
func (c *Config) Set(override string) error {
	key, val, ok := strings.Cut(override, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("config: override %q: want key.path=value", override)
	}
	v := reflect.ValueOf(c).Elem()
	for i, part := range strings.Split(key, ".") {
		if v.Kind() != reflect.Struct {
			return keyErr(key, "unknown key: %s is not a section", strings.Join(strings.Split(key, ".")[:i], "."))
		}
		f, ok := fieldByTag(v.Type(), part)
		if !ok {
			return keyErr(key, "unknown key (known keys of this section: %s)", strings.Join(tagsOf(v.Type()), ", "))
		}
		v = v.FieldByIndex(f.Index)
	}
	if v.Kind() == reflect.Struct {
		return keyErr(key, "is a section; set one of its keys (%s)", strings.Join(tagsOf(v.Type()), ", "))
	}
	ptr := reflect.New(v.Type())
	if err := yaml.Unmarshal([]byte(val), ptr.Interface()); err != nil {
		return keyErr(key, "value %q: %v", val, err)
	}
	v.Set(ptr.Elem())
	return nil
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
		nonneg("training.steps", t.Steps),
		nonneg("training.sft_steps", t.SFTSteps),
		pos("training.sft_batch_size", t.SFTBatchSize),
		finite("training.sft_lr", t.SFTLR, 0, 10),
		finite("training.gamma", t.Gamma, 0, 1),
		finite("training.lam", t.Lam, 0, 1),
		nonneg("training.val_freq", t.ValFreq),
		nonneg("training.save_freq", t.SaveFreq),
		nonneg("training.rollout_samples", t.RolloutSamples),
		nonneg("training.rollout_log_freq", t.RolloutLogFreq),
		pos("optimization.patch_size", o.PatchSize),
		finite("optimization.black_prob", o.BlackProb, 0, 1),
		finite("optimization.noise_std", o.NoiseStd, 0, math.MaxFloat64),
		finite("optimization.blur_radius", o.BlurRadius, 0, 100),
		pos("worker.actor.global_batch_size", a.GlobalBatchSize),
		pos("worker.actor.micro_batch_size_per_device_for_update", a.MicroBatchSizePerDeviceForUpdate),
		pos("worker.actor.micro_batch_size_per_device_for_experience", a.MicroBatchSizePerDeviceForExperience),
		pos("worker.actor.ppo_epochs", a.PPOEpochs),
		finite("worker.actor.clip_ratio_low", a.ClipRatioLow, 1e-12, 1),
		finite("worker.actor.clip_ratio_high", a.ClipRatioHigh, 1e-12, math.Inf(1)),
		finite("worker.actor.clip_ratio_dual", a.ClipRatioDual, 1+1e-12, math.Inf(1)),
		finite("worker.actor.max_grad_norm", a.MaxGradNorm, 0, math.Inf(1)),
		finite("worker.actor.kl_coef", a.KLCoef, 0, math.MaxFloat64),
		finite("worker.actor.entropy_penalty_coef", a.EntropyPenaltyCoef, -math.MaxFloat64, math.MaxFloat64),
		finite("worker.actor.optim.lr", a.Optim.LR, 0, 10),
		finite("worker.actor.optim.eps", a.Optim.Eps, 0, 1),
		finite("worker.actor.optim.weight_decay", a.Optim.WeightDecay, 0, 10),
		pos("worker.actor.model.patch_size", a.Model.PatchSize),
		pos("worker.actor.model.dim", a.Model.Dim),
		pos("worker.actor.model.layers", a.Model.Layers),
		pos("worker.actor.model.heads", a.Model.Heads),
		pos("worker.actor.model.mlp_dim", a.Model.MLPDim),
		pos("worker.rollout.n", r.N),
		finite("worker.rollout.temperature", r.Temperature, 1e-6, 100),
		finite("worker.rollout.top_p", r.TopP, 1e-6, 1),
		pos("worker.rollout.max_response_length", r.MaxResponseLength),
		finite("worker.rollout.val_temperature", r.ValTemperature, 0, 100),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if d.Options < 2 || d.Options > 10 {
		return keyErr("dataset.options", "is %d, want 2..10 (letters A..J)", d.Options)
	}
	if d.TrainFiles == "" && d.TrainSize == 0 {
		return keyErr("dataset.train_size", "is 0 and dataset.train_files is empty: no training data")
	}
	if d.TrainFiles == "" && d.TrainSize < d.RolloutBatchSize {
		return keyErr("dataset.train_size", "is %d, want >= dataset.rollout_batch_size (%d)", d.TrainSize, d.RolloutBatchSize)
	}
	if d.RolloutBatchSize%a.GlobalBatchSize != 0 {
		return keyErr("worker.actor.global_batch_size", "is %d, want a divisor of dataset.rollout_batch_size (%d)", a.GlobalBatchSize, d.RolloutBatchSize)
	}
	if rows := a.GlobalBatchSize * r.N; rows%a.MicroBatchSizePerDeviceForUpdate != 0 {
		return keyErr("worker.actor.micro_batch_size_per_device_for_update", "is %d, want a divisor of the mini-batch rows global_batch_size*rollout.n = %d", a.MicroBatchSizePerDeviceForUpdate, rows)
	}
	if len(a.Optim.Betas) != 2 || !(a.Optim.Betas[0] >= 0 && a.Optim.Betas[0] < 1) || !(a.Optim.Betas[1] >= 0 && a.Optim.Betas[1] < 1) {
		return keyErr("worker.actor.optim.betas", "is %v, want two values in [0, 1)", a.Optim.Betas)
	}
	if a.Model.Dim%a.Model.Heads != 0 {
		return keyErr("worker.actor.model.heads", "is %d, want a divisor of worker.actor.model.dim (%d)", a.Model.Heads, a.Model.Dim)
	}
	if d.ImageSize%a.Model.PatchSize != 0 {
		return keyErr("worker.actor.model.patch_size", "is %d, want a divisor of dataset.image_size (%d)", a.Model.PatchSize, d.ImageSize)
	}
	if t.FindLastCheckpoint && t.RunDir == "" {
		return keyErr("training.find_last_checkpoint", "is true but training.run_dir is empty: name the run directory to resume")
	}
	if _, err := advantage.ParseEstimator(t.AdvEstimator); err != nil {
		return keyErr("training.adv_estimator", "%v", err)
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
	if _, err := ppo.ParseLossType(a.LossType); err != nil {
		return keyErr("worker.actor.loss_type", "%v", err)
	}
	if _, err := ppo.ParseAggMode(a.LossAvgMode); err != nil {
		return keyErr("worker.actor.loss_avg_mode", "%v", err)
	}
	if _, err := divergence.ParseKind(a.KLPenalty); err != nil {
		return keyErr("worker.actor.kl_penalty", "%v", err)
	}
	if _, err := c.Update(); err != nil {
		return err
	}
	return nil
}

// Tokens is the token-perception configuration (the optimization section's tprl keys).
func (c Config) Tokens() tprl.Config { return c.Optimization.Config }

// Update maps the actor section and the tokens onto tprl.UpdateConfig.
func (c Config) Update() (tprl.UpdateConfig, error) {
	a := c.Worker.Actor
	lt, err := ppo.ParseLossType(a.LossType)
	if err != nil {
		return tprl.UpdateConfig{}, keyErr("worker.actor.loss_type", "%v", err)
	}
	mode, err := ppo.ParseAggMode(a.LossAvgMode)
	if err != nil {
		return tprl.UpdateConfig{}, keyErr("worker.actor.loss_avg_mode", "%v", err)
	}
	kl, err := divergence.ParseKind(a.KLPenalty)
	if err != nil {
		return tprl.UpdateConfig{}, keyErr("worker.actor.kl_penalty", "%v", err)
	}
	pol := ppo.DefaultPolicyConfig(lt)
	pol.ClipLow, pol.ClipHigh, pol.ClipDual = a.ClipRatioLow, a.ClipRatioHigh, a.ClipRatioDual
	pol.Agg = ppo.Agg{Mode: mode, Horizon: c.Worker.Rollout.MaxResponseLength}
	u := tprl.UpdateConfig{
		Tokens: c.Tokens(), Policy: pol,
		UseKLLoss: a.UseKLLoss, KLPenalty: kl, KLCoef: a.KLCoef,
		UseEntropyPenalty: a.UseEntropyPenalty, EntropyPenaltyCoef: a.EntropyPenaltyCoef,
	}
	if err := u.Validate(); err != nil {
		return u, fmt.Errorf("config: worker.actor / optimization: %w", err)
	}
	return u, nil
}

// Advantage maps training.adv_estimator, gamma and lam onto advantage.Config.
func (c Config) Advantage() (advantage.Config, error) {
	est, err := advantage.ParseEstimator(c.Training.AdvEstimator)
	if err != nil {
		return advantage.Config{}, keyErr("training.adv_estimator", "%v", err)
	}
	ac := advantage.DefaultConfig()
	ac.Estimator, ac.Gamma, ac.Lambda = est, c.Training.Gamma, c.Training.Lam
	return ac, ac.Validate()
}

// Perturbation builds the image perturbation of optimization.perturbation.
func (c Config) Perturbation() (perturb.Perturbation, error) {
	o := c.Optimization
	k, err := perturb.ParseKind(o.Perturbation)
	if err != nil {
		return nil, keyErr("optimization.perturbation", "%v", err)
	}
	var p perturb.Perturbation
	switch k {
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
		return nil, keyErr("optimization."+o.Perturbation, "%v", err)
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
