package divergence_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/tensor"
)

func ExamplePenalty() {
	logp := tensor.Must(tensor.FromFloat32([]float32{-1, -2, -0.5, -3}, 2, 2))
	ref := tensor.Must(tensor.FromFloat32([]float32{-1.5, -1, -0.5, -1}, 2, 2))
	kind, _ := divergence.ParseKind("k3")
	out := make([]float32, 4)
	dst := tensor.Must(tensor.FromFloat32(out, 2, 2))
	if err := divergence.Penalty(dst, logp, ref, kind); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%v %.4f\n", kind, out)
	// Output: low_var_kl [0.1065 0.7183 0.0000 4.3891]
}

// The gradient of a loss sum(w * mse penalty) with respect to the log-probs: w * (logp - ref),
// and exactly 0 where w is 0 (a masked token).
func ExamplePenaltyBackward() {
	logp := tensor.Must(tensor.FromFloat32([]float32{-1, -2, -0.5}, 1, 3))
	ref := tensor.Must(tensor.FromFloat32([]float32{-1.5, -1, -0.5}, 1, 3))
	w := tensor.Must(tensor.FromFloat32([]float32{2, 0.5, 0}, 1, 3))
	out := make([]float32, 3)
	in := divergence.PenaltyGrad{LogProbs: logp, Ref: ref, DPenalty: w, Kind: divergence.MSE}
	if err := divergence.PenaltyBackward(tensor.Must(tensor.FromFloat32(out, 1, 3)), in); err != nil {
		fmt.Println(err)
	}
	fmt.Println(out)
	// Output: [1 -0.5 0]
}

func ExamplePerceptionScore() {
	old := tensor.Must(tensor.FromFloat32([]float32{-0.1, -2, -0.7}, 1, 3))
	aug := tensor.Must(tensor.FromFloat32([]float32{-0.1, -0.5, -30}, 1, 3))
	out := make([]float32, 3)
	if err := divergence.PerceptionScore(tensor.Must(tensor.FromFloat32(out, 1, 3)), old, aug); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%.4f\n", out)
	// Output: [0.0000 1.9817 10.0000]
}

func ExampleRewards() {
	scores := tensor.Must(tensor.FromFloat32([]float32{0, 0, 1}, 1, 3))
	logp := tensor.Must(tensor.FromFloat32([]float32{-1, -2, -1}, 1, 3))
	ref := tensor.Must(tensor.FromFloat32([]float32{-1.5, -1, -1}, 1, 3))
	out := make([]float32, 3)
	if err := divergence.Rewards(tensor.Must(tensor.FromFloat32(out, 1, 3)), scores, logp, ref, 0.1); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%.3f\n", out)
	// Output: [-0.050 0.100 1.000]
}

func ExampleNewController() {
	ctl, err := divergence.NewController(divergence.ControllerConfig{
		Type: divergence.AdaptiveController, Coef: 0.1, Target: 0.1, Horizon: 1000,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctl.Update(0.5, 100) // KL far above target: proportional error clipped to 0.2
	fmt.Printf("%.4f\n", ctl.Coef())
	_, err = divergence.NewController(divergence.ControllerConfig{Type: divergence.AdaptiveController, Coef: 0.1, Target: 0.1})
	fmt.Println(err)
	// Output:
	// 0.1020
	// divergence.NewController: Horizon: is 0, want a finite value > 0: invalid parameter
}
