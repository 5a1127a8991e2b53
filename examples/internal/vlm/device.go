package vlm

import (
	"github.com/mtrl-go/mtrl/tensor"
)

// resident is the model's copy on an op set's backend (UseOps) and which of its two copies —
// the host Params and the OpsModel's — holds the newer values. Weights and gradients move
// together, and only when the other side needs them: a training step that stays on the device
// (forward, backward, the optimizer through DeviceParams) transfers none.
type resident struct {
	om *OpsModel
	// hostStale: the device copy changed since the host one was written (download before a host
	// read). devStale: the host copy may have changed (upload before the device's next use).
	hostStale, devStale bool
	uploads, downloads  int   // whole-model transfers (Transfers)
	err                 error // a failed transfer or ZeroGrad: every later device use returns it
}

// UseOps moves the model onto the op set o (a CUDAOps: on a GPU): its weights and gradients are
// copied to o's backend once and live there, Forward and Backward run there, and only what the
// host asks for comes back. Params (a host read or write) downloads the device copy when it is
// newer and marks the host copy as the one to upload at the next device use; Generate reads
// the host copy the same way; DeviceParams hands the device tensors to an optimizer on the
// device. Forward still returns host logits (ForwardOnBackend keeps them on the device).
// UseOps(nil) brings the newest values back to the host and runs there again.
func (m *Model) UseOps(o Ops) error {
	if m.dev != nil {
		err := m.hostRead()
		m.dev.om.Release()
		m.dev = nil
		if err != nil {
			return err
		}
	}
	if o == nil {
		return nil
	}
	om, err := NewOpsModel(m, o)
	if err != nil {
		return err
	}
	m.dev = &resident{om: om, uploads: 1}
	return nil
}

// Backend is where Forward and Backward run: the op set's backend after UseOps, else the CPU.
func (m *Model) Backend() tensor.Backend {
	if m.dev == nil {
		return tensor.CPU()
	}
	return m.dev.om.ops.Backend()
}

// Ops is the op set of UseOps (nil on the host).
func (m *Model) Ops() Ops {
	if m.dev == nil {
		return nil
	}
	return m.dev.om.ops
}

// HostParams returns Params for reading (a checkpoint, a copy): brought up to date on the host
// like Params, without marking them for upload. Changes to them are not seen by the device
// copy; write through Params.
func (m *Model) HostParams() []*Param {
	_ = m.hostRead() // a failure is sticky: the model's next device use returns it
	return m.params
}

// DeviceParams returns the parameters on the op set's backend (UseOps; nil on the host), in
// Params' order, for an optimizer that runs there: the caller may change W and G in place,
// and the host copy is refreshed from them when the host next reads it.
func (m *Model) DeviceParams() ([]*Param, error) {
	if m.dev == nil {
		return nil, nil
	}
	if err := m.deviceUse(); err != nil {
		return nil, err
	}
	m.dev.hostStale = true
	return m.dev.om.params, nil
}

// Transfers counts the whole-model copies between the host and the op set's backend since
// UseOps (the first upload included); the per-call traffic of a step on the device is logits
// and token ids, never weights, so a step should add nothing here.
func (m *Model) Transfers() (uploads, downloads int) {
	if m.dev == nil {
		return 0, 0
	}
	return m.dev.uploads, m.dev.downloads
}

// hostRead brings the host copy up to date (a no-op on the host or when it is current).
func (m *Model) hostRead() error {
	r := m.dev
	if r == nil {
		return nil
	}
	if r.err != nil || !r.hostStale {
		return r.err
	}
	for i, p := range m.params {
		if r.err = tensor.CopyInto(p.W, r.om.params[i].W); r.err != nil {
			return r.err
		}
		if r.err = tensor.CopyInto(p.G, r.om.params[i].G); r.err != nil {
			return r.err
		}
	}
	r.hostStale = false
	r.downloads++
	return nil
}

// hostAccess is Params' side of the protocol: the host copy is current and may be written.
func (m *Model) hostAccess() {
	if m.dev == nil {
		return
	}
	if m.hostRead() == nil {
		m.dev.devStale = true
	}
}

// deviceUse brings the device copy up to date before the op set uses it.
func (m *Model) deviceUse() error {
	r := m.dev
	if r.err != nil || !r.devStale {
		return r.err
	}
	for i, p := range m.params {
		if r.err = tensor.CopyInto(r.om.params[i].W, p.W); r.err != nil {
			return r.err
		}
		if r.err = tensor.CopyInto(r.om.params[i].G, p.G); r.err != nil {
			return r.err
		}
	}
	r.devStale = false
	r.uploads++
	return nil
}

// zeroDeviceGrad is ZeroGrad's device side: both copies of the gradients are zero afterwards,
// so neither side needs a transfer for them.
func (m *Model) zeroDeviceGrad() {
	if r := m.dev; r != nil && r.err == nil {
		r.err = r.om.ZeroGrad()
	}
}

// forwardOps is Forward on the op set (the tokens were validated by Forward), with the logits
// downloaded.
func (m *Model) forwardOps(images, tokens *tensor.Tensor) (*tensor.Tensor, *Activations, error) {
	logits, act, err := m.forwardDevice(images, tokens)
	if err != nil {
		return nil, nil, err
	}
	host, err := tensor.To(tensor.CPU(), logits)
	_ = logits.Release()
	if err != nil {
		act.Release()
		return nil, nil, err
	}
	return host, act, nil
}

func (m *Model) forwardDevice(images, tokens *tensor.Tensor) (*tensor.Tensor, *Activations, error) {
	if err := m.deviceUse(); err != nil {
		return nil, nil, err
	}
	logits, act, err := m.dev.om.Forward(images, tokens)
	if err != nil {
		return nil, nil, err
	}
	return logits, &Activations{m: m, rec: act}, nil
}

// ForwardOnBackend is Forward with the logits left on Backend() (the op set's after UseOps; the
// caller releases them): the log-prob ops can read them there, so they never cross to the host.
func (m *Model) ForwardOnBackend(images, tokens *tensor.Tensor) (*tensor.Tensor, *Activations, error) {
	if m.dev == nil {
		return m.Forward(images, tokens)
	}
	if _, _, err := checkTokens("vlm.Model.ForwardOnBackend", m.Config, tokens); err != nil {
		return nil, nil, err
	}
	return m.forwardDevice(images, tokens)
}

// backwardOps is Backward on the op set: the gradients accumulate into the device copy of G
// (dlogits may be on the host or already on the device).
func (m *Model) backwardOps(act *Activations, dlogits *tensor.Tensor) error {
	if err := m.deviceUse(); err != nil {
		return err
	}
	dl := dlogits
	if dl.Backend() != m.dev.om.ops.Backend() {
		var err error
		if dl, err = tensor.To(m.dev.om.ops.Backend(), dlogits); err != nil {
			return err
		}
		defer dl.Release()
	}
	m.dev.hostStale = true
	if act.rec.om != m.dev.om {
		return tensor.Errorf(tensor.ErrParam, "vlm.Model.Backward", "act", "was recorded on another op set")
	}
	return m.dev.om.Backward(act.rec, dl)
}

// Release frees the device memory of a record made on an op set (UseOps); host records need
// nothing (the garbage collector frees device memory too, later).
func (a *Activations) Release() {
	if a != nil {
		a.rec.Release()
	}
}
