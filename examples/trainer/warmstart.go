package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mtrl-go/mtrl/examples/internal/vlm"
	"github.com/mtrl-go/mtrl/tprl/loop"
)

// The warm start is checkpointed every training.sft_save_freq steps and on an interrupt, into
// checkpoints/sft_step_N (the newest only; removed once the RL checkpoint of step 0 exists), so
// that an interrupted warm start resumes where it stopped and continues exactly as an
// uninterrupted one.

const warmPrefix = "sft_step_"

// warmState is state.json of a warm-start checkpoint: the position and everything besides the
// weights and the warm start's AdamW moments that the rest of the warm start depends on.
type warmState struct {
	Step    int    `json:"sft_step"`
	AdamT   int    `json:"optimizer_step"`
	RNG     string `json:"rng_state"` // base64 of the warm start's PCG's MarshalBinary
	Skipped int    `json:"skipped_steps"`
	// RecentLoss holds the float64 bits of the last losses (the step-0 line's sft/loss is
	// their mean), bits so that a NaN survives JSON.
	RecentLoss []uint64 `json:"recent_loss_bits"`
	// ValBefore is the validation accuracy before the warm start (training.val_before_train;
	// nil: NaN, no validation prompts), Seconds the warm start's time in earlier segments.
	ValBefore   *float64   `json:"val_accuracy_before,omitempty"`
	Seconds     float64    `json:"elapsed_s"`
	ModelConfig vlm.Config `json:"model_config"`
	Time        string     `json:"saved_at"`
}

// warmRun is the warm start's checkpointing: where it resumes (nil: from the start), how often
// it saves, and the run's values the state carries.
type warmRun struct {
	ck        *Checkpoints
	every     int
	from      *warmResume
	valBefore float64   // stored with each save
	started   time.Time // of this segment
	saved     func(dir string, step int)
}

// warmResume is a loaded warm-start checkpoint: its state and AdamW, the weights already in
// the model.
type warmResume struct {
	st  warmState
	opt *loop.AdamW
	pcg *rand.PCG
}

func (w *warmRun) resumeStep() int {
	if w == nil || w.from == nil {
		return 0
	}
	return w.from.st.Step
}

// save writes the warm start's checkpoint after step steps (the lead rank only) and removes
// the older ones.
func (t *Trainer) saveWarm(w *warmRun, step int, opt *loop.AdamW, pcg *rand.PCG, recent []float64) error {
	if !t.lead() {
		return nil
	}
	if t.dev != nil {
		if err := t.dev.saveMoments(opt); err != nil {
			return err
		}
	}
	mb, ob, err := encodeModelAndMoments(t.model.HostParams(), opt)
	if err != nil {
		return err
	}
	rng, err := encodePCG(pcg)
	if err != nil {
		return err
	}
	st := warmState{Step: step, AdamT: opt.T, RNG: rng, Skipped: t.skipped,
		Seconds: w.seconds(), ModelConfig: t.model.Config, Time: time.Now().UTC().Format(time.RFC3339)}
	if !math.IsNaN(w.valBefore) {
		st.ValBefore = ptr(w.valBefore)
	}
	for _, l := range recent {
		st.RecentLoss = append(st.RecentLoss, math.Float64bits(l))
	}
	sb, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir, err := w.ck.saveDir(warmPrefix+strconv.Itoa(step), map[string][]byte{ckptModel: mb, ckptOptimizer: ob,
		ckptState: append(sb, '\n'), ckptConfig: t.cfg.YAML()}, nil)
	if err != nil {
		return fmt.Errorf("warm-start checkpoint step %d: %w", step, err)
	}
	if w.saved != nil {
		w.saved(dir, step)
	}
	return w.ck.removeWarm(step)
}

// seconds is the warm start's time so far, earlier segments included.
func (w *warmRun) seconds() float64 {
	s := time.Since(w.started).Seconds()
	if w.from != nil {
		s += w.from.st.Seconds
	}
	return s
}

// removeWarm removes the warm-start checkpoints other than sft_step_<keep> (keep < 0: all),
// complete or not.
func (c *Checkpoints) removeWarm(keep int) error {
	steps, err := c.list(warmPrefix, true)
	if err != nil {
		return err
	}
	for _, s := range steps {
		if s != keep {
			if err := c.removeDir(filepath.Join(c.Root, warmPrefix+strconv.Itoa(s))); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadWarm restores the warm-start checkpoint in dir: the weights into the model, the rest
// returned. Everything is checked before the model changes.
func (t *Trainer) loadWarm(dir string) (*warmResume, error) {
	files, err := readCheckpoint(dir, ckptModel, ckptOptimizer, ckptState)
	if err != nil {
		return nil, err
	}
	var st warmState
	if err := json.Unmarshal(files[ckptState], &st); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", filepath.Join(dir, ckptState), err)
	}
	if st.ModelConfig != t.model.Config {
		return nil, fmt.Errorf("checkpoint %s: model config %+v differs from this run's %+v (worker.actor.model, dataset)", dir, st.ModelConfig, t.model.Config)
	}
	if st.Step < 0 || st.Step > t.cfg.Training.SFTSteps || st.AdamT < 0 || st.Skipped < 0 {
		return nil, fmt.Errorf("checkpoint %s: warm-start step %d (optimizer step %d, skipped %d) outside training.sft_steps %d", dir, st.Step, st.AdamT, st.Skipped, t.cfg.Training.SFTSteps)
	}
	pcg, err := decodePCG(st.RNG)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: rng_state: %w", dir, err)
	}
	ps := t.model.Params()
	ws, ms, vs, err := decodeModelAndMoments(dir, files, ps)
	if err != nil {
		return nil, err
	}
	opt := loop.NewAdamW(sizesOf(t.model), 0.9, 0.999, 1e-8, t.cfg.Worker.Actor.Optim.WeightDecay)
	for i, p := range ps {
		w, _ := p.W.Float32s()
		copy(w, ws[i])
		copy(opt.M[i], ms[i])
		copy(opt.V[i], vs[i])
	}
	opt.T, t.skipped = st.AdamT, st.Skipped
	return &warmResume{st: st, opt: opt, pcg: pcg}, nil
}

// encodePCG is a checkpoint's rng_state: the base64 of pcg's MarshalBinary (decodePCG reads
// it back).
func encodePCG(pcg *rand.PCG) (string, error) {
	b, err := pcg.MarshalBinary()
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

func decodePCG(s string) (*rand.PCG, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	pcg := &rand.PCG{}
	if err := pcg.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return pcg, nil
}

// encodeModelAndMoments encodes the weights of ps (model.safetensors) and opt's moments
// (optimizer.safetensors, exp_avg.<name> and exp_avg_sq.<name>).
func encodeModelAndMoments(ps []*vlm.Param, opt *loop.AdamW) (model, optim []byte, err error) {
	var mt, ot []NamedTensor
	for i, p := range ps {
		w, _ := p.W.Float32s()
		shape := []int(p.W.Shape())
		mt = append(mt, NamedTensor{Name: p.Name, Shape: shape, Data: w})
		if opt.M != nil {
			ot = append(ot, NamedTensor{Name: "exp_avg." + p.Name, Shape: shape, Data: opt.M[i]},
				NamedTensor{Name: "exp_avg_sq." + p.Name, Shape: shape, Data: opt.V[i]})
		}
	}
	if model, err = EncodeSafetensors(mt, map[string]string{"format": "mtrl-example-vlm"}); err != nil {
		return nil, nil, err
	}
	if opt.M == nil { // sharded: no whole moments here (saveMomentShards)
		return model, nil, nil
	}
	if optim, err = EncodeSafetensors(ot, map[string]string{"optimizer": "adamw"}); err != nil {
		return nil, nil, err
	}
	return model, optim, nil
}

// decodeModelAndMoments decodes model.safetensors and optimizer.safetensors of files (read
// from dir) for the parameters ps: the weights and both moments of each, checked.
func decodeModelAndMoments(dir string, files map[string][]byte, ps []*vlm.Param) (ws, ms, vs [][]float32, err error) {
	model, err := DecodeSafetensors(files[ckptModel], filepath.Join(dir, ckptModel))
	if err != nil {
		return nil, nil, nil, err
	}
	if ws, err = paramData(model, filepath.Join(dir, ckptModel), "", ps); err != nil {
		return nil, nil, nil, err
	}
	if _, ok := files[ckptShardIndex]; ok { // per-rank shards
		params := vlmShardParams(ps)
		shards, err := momentShards(dir, files, params, allValues(params))
		if err != nil {
			return nil, nil, nil, err
		}
		ms, vs, err = wholeFromShards(shards, params)
		return ws, ms, vs, err
	}
	optim, err := DecodeSafetensors(files[ckptOptimizer], filepath.Join(dir, ckptOptimizer))
	if err != nil {
		return nil, nil, nil, err
	}
	if ms, err = paramData(optim, filepath.Join(dir, ckptOptimizer), "exp_avg.", ps); err != nil {
		return nil, nil, nil, err
	}
	if vs, err = paramData(optim, filepath.Join(dir, ckptOptimizer), "exp_avg_sq.", ps); err != nil {
		return nil, nil, nil, err
	}
	return ws, ms, vs, nil
}

// paramData returns the values of tensors prefix+name of a decoded file (path in errors) for
// the parameters ps, checked by tensorData.
func paramData(m map[string]NamedTensor, path, prefix string, ps []*vlm.Param) ([][]float32, error) {
	out := make([][]float32, 0, len(ps))
	for _, p := range ps {
		v, err := tensorData(m, path, prefix+p.Name, p.W.Len())
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// tensorData returns the n values of tensor name of a decoded file (path in errors). A
// checkpoint never holds a non-finite value (the trainer skips non-finite steps), so one is
// damage.
func tensorData(m map[string]NamedTensor, path, name string, n int) ([]float32, error) {
	nt, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensor %q", path, name)
	}
	if len(nt.Data) != n {
		return nil, fmt.Errorf("checkpoint %s: tensor %q has %d values, want %d", path, name, len(nt.Data), n)
	}
	for i, x := range nt.Data {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("checkpoint %s: tensor %q holds %v at index %d (damaged: a checkpoint holds finite values only)", path, name, x, i)
		}
	}
	return nt.Data, nil
}
