// The CPU emulation of gorgonia.org/cu's driver API: used only through a replace directive
// (scripts/cuda-emu), never imported under this path.
module gorgonia.org/cu

go 1.26
