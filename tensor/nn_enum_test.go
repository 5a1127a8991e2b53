package tensor_test

import (
	"encoding/json"
	"testing"

	"github.com/mtrl-go/mtrl/tensor"
)

// TestActivationText: every activation survives JSON as its Hugging Face name; an undefined
// value cannot be marshalled and an unknown name cannot be unmarshalled.
func TestActivationText(t *testing.T) {
	for _, a := range []tensor.Activation{tensor.SiLU, tensor.GELU, tensor.GELUTanh, tensor.QuickGELU} {
		b, err := json.Marshal(a)
		if err != nil || string(b) != `"`+a.String()+`"` {
			t.Errorf("%v marshals to %s, %v", a, b, err)
		}
		var back tensor.Activation
		if err := json.Unmarshal(b, &back); err != nil || back != a {
			t.Errorf("%s unmarshals to %v, %v", b, back, err)
		}
	}
	if _, err := json.Marshal(tensor.Activation(9)); err == nil {
		t.Error("Activation(9) marshals")
	}
	var a tensor.Activation
	if err := json.Unmarshal([]byte(`"relu6"`), &a); err == nil {
		t.Error(`"relu6" unmarshals`)
	}
	if a, err := tensor.ParseActivation("gelu_pytorch_tanh"); err != nil || a != tensor.GELUTanh {
		t.Errorf("ParseActivation(gelu_pytorch_tanh) = %v, %v", a, err)
	}
}
