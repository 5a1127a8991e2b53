package main

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

// TestDiagnoseWarmStart (MTRL_DIAG=1) warm-starts the default configuration (plus the overrides
// in MTRL_DIAG_ARGS, space-separated; training.load_checkpoint_path starts from a checkpoint,
// training.sft_steps=0 then diagnoses it as it is) and splits greedy validation into: is the think's visual
// value right, and does the answer letter name the option the think chose.
func TestDiagnoseWarmStart(t *testing.T) {
	if os.Getenv("MTRL_DIAG") == "" {
		t.Skip("MTRL_DIAG not set")
	}
	cfg, err := LoadConfig("", strings.Fields(os.Getenv("MTRL_DIAG_ARGS")))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Training.LoadCheckpointPath; p != "" {
		if err := tr.LoadWeights(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.WarmStart(context.Background(), NewProgress(os.Stderr, "warm", cfg.Training.SFTSteps, false)); err != nil {
		t.Fatal(err)
	}
	thinkOK, consistent, letterA, acc, n := 0, 0, 0, 0, 0
	perKind := map[string][2]int{}
	r := rand.New(rand.NewPCG(1, 2))
	b, _ := tr.newBatch(tr.val, make([][]int32, len(tr.val)))
	prompts := make([][]int32, len(tr.val))
	for i, e := range tr.val {
		prompts[i] = e.prompt
	}
	out, err := tr.model.GenerateTopK(b.images, prompts, tr.respLen, 0, 1, 0, r)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range tr.val {
		resp := tr.tok.Decode(out[i])
		sc := vqa.Score(resp, e.s.Answer, tr.reward)
		ref := e.s.Response
		refThink := ref[:strings.Index(ref, "</think>")]
		think := resp
		if k := strings.Index(resp, "</think>"); k >= 0 {
			think = resp[:k]
		}
		tk := think == refThink
		if tk {
			thinkOK++
		}
		// letter consistent with the think: the option whose value ends the think
		letter, _, ok := vqa.ExtractChoice(resp)
		if ok && letter == "A" {
			letterA++
		}
		opts := strings.Fields(e.s.Prompt)
		val := ""
		for j := 0; j+1 < len(opts); j++ {
			if opts[j] == letter && ok {
				val = opts[j+1]
			}
		}
		if val != "" && strings.Contains(think, " "+val) {
			consistent++
		}
		acc += int(sc.Accuracy)
		n++
		kind := strings.Fields(e.s.Prompt)[0] + "_" + strings.Fields(e.s.Prompt)[1]
		pk := perKind[kind]
		pk[0] += int(sc.Accuracy)
		pk[1]++
		perKind[kind] = pk
		if i < 6 {
			t.Logf("%q → %q (answer %s)", e.s.Prompt, resp, e.s.Answer)
		}
	}
	t.Logf("val acc %.3f, think exactly right %.3f, letter consistent with think %.3f, answers A %.3f", float64(acc)/float64(n), float64(thinkOK)/float64(n), float64(consistent)/float64(n), float64(letterA)/float64(n))
	for k, v := range perKind {
		t.Logf("  %-16s acc %.3f (%d)", k, float64(v[0])/float64(v[1]), v[1])
	}
}
