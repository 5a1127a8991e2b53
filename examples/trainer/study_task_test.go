package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

// TestReasoningTaskAndRandomFilter: the study's keys work end to end — dataset.task=reasoning
// generates reasoning chains without the planted bias, and optimization.enable_random_filtering
// trains on the random mask (its token fraction is logged; with the perception filter it is an
// error).
func TestReasoningTaskAndRandomFilter(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(t, dir, "dataset.task=reasoning", "dataset.max_response_length=48",
		"optimization.enable_perception_filtering=false", "optimization.enable_trajectory_reweighting=false",
		"optimization.enable_random_filtering=true", "optimization.top_p_random_tokens=0.25")
	require.Equal(t, vqa.ReasoningChain, cfg.Dataset.Task)
	require.Zero(t, cfg.Training.SFTShortcut, "the default shortcut must be dropped for the reasoning task")
	tr, err := NewTrainer(cfg)
	require.NoError(t, err)
	require.True(t, strings.Contains(tr.train[0].s.Response, " . "), "not a reasoning chain: %q", tr.train[0].s.Response)
	run(t, cfg)
	lines, err := ReadMetrics(dir + "/metrics.jsonl")
	require.NoError(t, err)
	var seen int
	for _, l := range lines {
		if v := l.Metrics["actor/random_token_fraction"]; v != nil {
			require.InDelta(t, 0.25, *v, 0.1)
			seen++
		}
		require.Nil(t, l.Metrics["actor/perception_token_fraction"])
	}
	require.Equal(t, cfg.Training.Steps, seen)

	_, err = LoadConfig("", []string{"optimization.enable_random_filtering=true", "optimization.enable_perception_filtering=true"})
	require.ErrorContains(t, err, "enable_random_filtering")
	_, err = LoadConfig("", []string{"dataset.task=reasoning", "training.sft_shortcut=0.5"})
	require.ErrorContains(t, err, "sft_shortcut")
	_, err = LoadConfig("", []string{"dataset.task=long"})
	require.ErrorContains(t, err, "long")
}

// TestStudyArmFiles: the study's arm files load, each turns on what its name says, and they
// differ in nothing else.
func TestStudyArmFiles(t *testing.T) {
	want := map[string][4]bool{ // perception, shaping, entropy, random
		"grpo": {}, "vppo": {true, true, false, false}, "grpo_tgf": {true, false, false, false},
		"grpo_tas": {false, true, false, false}, "grpo_entropy": {false, false, true, false},
		"grpo_random": {false, false, false, true},
	}
	var common string
	for arm, flags := range want {
		cfg, err := LoadConfig("study/"+arm+".yaml", nil)
		require.NoError(t, err, arm)
		o := &cfg.Optimization
		require.Equal(t, flags, [4]bool{o.EnablePerceptionFiltering, o.EnableTrajectoryReweighting,
			o.EnableEntropyFiltering, o.EnableRandomFiltering}, arm)
		require.Equal(t, vqa.ReasoningChain, cfg.Dataset.Task, arm)
		require.Zero(t, cfg.Training.SFTShortcut, arm)
		require.Equal(t, o.TopPPerceptionTokens, o.TopPRandomTokens, "%s: the control must keep as many tokens", arm)
		o.EnablePerceptionFiltering, o.EnableTrajectoryReweighting, o.EnableEntropyFiltering, o.EnableRandomFiltering = false, false, false, false
		y := string(cfg.YAML())
		if common == "" {
			common = y
		}
		require.Equal(t, common, y, "%s differs from the other arms beyond the enable_* keys", arm)
	}
}
