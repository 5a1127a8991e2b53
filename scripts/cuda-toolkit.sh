# Sourced by scripts/ci-cuda and scripts/cuda-emu: installs Debian's nvidia-cuda-toolkit (nvcc,
# ptxas, the libcuda stub) when it is missing. Needs root or sudo; no GPU.
install_cuda_toolkit() {
  if command -v nvcc >/dev/null 2>&1 && command -v ptxas >/dev/null 2>&1 && [ -f /usr/include/cuda.h ]; then
    return
  fi
  echo "== installing nvidia-cuda-toolkit (Debian contrib/non-free)"
  local SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    $SUDO sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' /etc/apt/sources.list.d/debian.sources
  fi
  if [ -f /etc/apt/sources.list ]; then
    $SUDO sed -i -E 's/^(deb .* main)$/\1 contrib non-free non-free-firmware/' /etc/apt/sources.list
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nvidia-cuda-toolkit >/dev/null
}
