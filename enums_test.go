package mtrl_test

import (
	"encoding"
	"encoding/json"
	"testing"

	"github.com/mtrl-go/mtrl/advantage"
	"github.com/mtrl-go/mtrl/divergence"
	"github.com/mtrl-go/mtrl/perturb"
	"github.com/mtrl-go/mtrl/ppo"
	"github.com/mtrl-go/mtrl/tensor"
	"github.com/mtrl-go/mtrl/tprl"
)

// textEnum checks that every value of an enum is Valid and survives JSON as its String name,
// that a value outside the constants is not Valid and cannot be marshalled and that an unknown
// name cannot be unmarshalled.
func textEnum[T interface {
	comparable
	encoding.TextMarshaler
	String() string
	Valid() bool
}, P interface {
	*T
	encoding.TextUnmarshaler
}](t *testing.T, values []T, invalid T) {
	t.Helper()
	for _, v := range values {
		if !v.Valid() {
			t.Errorf("%T %v is not Valid", v, v)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Errorf("%T %v: %v", v, v, err)
			continue
		}
		if want, _ := json.Marshal(v.String()); string(b) != string(want) {
			t.Errorf("%T %v marshals to %s, want %s", v, v, b, want)
		}
		var back T
		if err := json.Unmarshal(b, P(&back)); err != nil || back != v {
			t.Errorf("%T %s: unmarshalled %v, %v", v, b, back, err)
		}
	}
	if invalid.Valid() {
		t.Errorf("%T(%v) is Valid", invalid, invalid)
	}
	if _, err := json.Marshal(invalid); err == nil {
		t.Errorf("%T(%v) marshalled", invalid, invalid)
	}
	var x T
	if err := json.Unmarshal([]byte(`"no such name"`), P(&x)); err == nil {
		t.Errorf("%T: an unknown name unmarshalled", x)
	}
}

func TestEnumsAreText(t *testing.T) {
	textEnum(t, []advantage.Estimator{advantage.EstimatorGRPO, advantage.EstimatorGAE, advantage.EstimatorGRPOPassK,
		advantage.EstimatorRLOO, advantage.EstimatorReinforcePlusPlus, advantage.EstimatorReMax}, 99)
	textEnum(t, []divergence.ControllerType{divergence.FixedController, divergence.AdaptiveController}, 99)
	textEnum(t, []divergence.Kind{divergence.KL, divergence.Abs, divergence.MSE, divergence.LowVarKL, divergence.Full}, 99)
	textEnum(t, []perturb.Kind{perturb.PatchBlackening, perturb.GaussianNoise, perturb.CompleteMasking, perturb.GaussianBlur}, 99)
	textEnum(t, []ppo.AggMode{ppo.Token, ppo.Seq, ppo.SeqMeanTokenSum, ppo.SeqMeanTokenSumNorm}, 99)
	textEnum(t, []ppo.LossType{ppo.Vanilla, ppo.GSPO, ppo.GSPOToken, ppo.CISPO, ppo.SAPO}, 99)
	textEnum(t, []tprl.Filter{tprl.EntropyFilter, tprl.PerceptionFilter, tprl.RandomFilter}, 99)
	textEnum(t, []tprl.ShapingScope{tprl.GlobalScope, tprl.PerMicroBatchScope}, 99)
	textEnum(t, []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Uint8}, 0)
}
