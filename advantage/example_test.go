package advantage_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/tensor"
)

// Two prompts with two responses each (rows 0 and 2 answer prompt 10, rows 1 and 3 prompt 11);
// the outcome reward sits on the last valid token.
func ExampleCompute_grpo() {
	rewards := tensor.Must(tensor.FromFloat32([]float32{
		0, 1, 0,
		0, 0, 0,
		0, 0, 0,
		1, 0, 0,
	}, 4, 3))
	mask := tensor.Must(tensor.FromFloat32([]float32{
		1, 1, 0,
		1, 1, 1,
		1, 1, 1,
		1, 0, 0,
	}, 4, 3))
	index := tensor.Must(tensor.FromInt32([]int32{10, 11, 10, 11}, 4))
	adv := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 4, 3))
	in := advantage.Inputs{Rewards: rewards, ResponseMask: mask, Index: index}
	if err := advantage.Compute(adv, in, advantage.DefaultConfig()); err != nil { // GRPO
		panic(err)
	}
	a, _ := adv.Float32s()
	for i := range 4 {
		fmt.Printf("%.4f\n", a[i*3:i*3+3])
	}
	// Output:
	// [0.7071 0.7071 0.0000]
	// [-0.7071 -0.7071 -0.7071]
	// [-0.7071 -0.7071 -0.7071]
	// [0.7071 0.0000 0.0000]
}

// GAE on one response with right padding: the padded position gets raw advantage 0 and
// returns equal to its value; advantages are whitened over the valid tokens.
func ExampleComputeWithReturns_gae() {
	rewards := tensor.Must(tensor.FromFloat32([]float32{0, 0, 1, 0}, 1, 4))
	values := tensor.Must(tensor.FromFloat32([]float32{0.2, 0.4, 0.6, 0.5}, 1, 4))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 0}, 1, 4))
	adv := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, 4))
	ret := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 1, 4))
	cfg := advantage.Config{Estimator: advantage.EstimatorGAE, Gamma: 1, Lambda: 1}
	in := advantage.Inputs{Rewards: rewards, Values: values, ResponseMask: mask}
	if err := advantage.ComputeWithReturns(adv, ret, in, cfg); err != nil {
		panic(err)
	}
	a, _ := adv.Float32s()
	r, _ := ret.Float32s()
	fmt.Printf("advantages %.3f\nreturns    %.3f\n", a, r)
	// Output:
	// advantages [1.000 0.000 -1.000 -3.000]
	// returns    [1.000 1.000 1.000 0.500]
}

// Compute dispatches on a Config whose estimator comes from the reference's name, as a YAML or
// command-line value would.
func ExampleCompute() {
	est, err := advantage.ParseEstimator("rloo")
	if err != nil {
		panic(err)
	}
	cfg := advantage.DefaultConfig()
	cfg.Estimator = est
	rewards := tensor.Must(tensor.FromFloat32([]float32{1, 0, 3, 0, 2, 0}, 3, 2))
	mask := tensor.Must(tensor.FromFloat32([]float32{1, 1, 1, 0, 1, 1}, 3, 2))
	index := tensor.Must(tensor.FromInt32([]int32{0, 0, 0}, 3))
	adv := tensor.Must(tensor.New(tensor.CPU(), tensor.Float32, 3, 2))
	in := advantage.Inputs{Rewards: rewards, ResponseMask: mask, Index: index}
	if err := advantage.Compute(adv, in, cfg); err != nil {
		panic(err)
	}
	a, _ := adv.Float32s()
	fmt.Println(cfg.Estimator, a)

	// Forgetting the group ids is an error naming the missing input.
	in.Index = nil
	fmt.Println(advantage.Compute(adv, in, cfg))
	// Output:
	// rloo [-1.5 -1.5 1.5 0 0 0]
	// advantage.Compute: Inputs.Index: is required by estimator "rloo": invalid parameter
}

func ExampleParseEstimator() {
	for _, name := range []string{"gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "remax", "ppo"} {
		e, err := advantage.ParseEstimator(name)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(e)
	}
	// Output:
	// gae
	// grpo
	// grpo_passk
	// rloo
	// reinforce_plus_plus
	// remax
	// advantage.ParseEstimator: s: unknown estimator "ppo", want one of [grpo gae grpo_passk rloo reinforce_plus_plus remax]: invalid parameter
}
