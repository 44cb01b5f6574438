#!/usr/bin/env bash
# Makes sure the system has a software GPU for the tests of hptune-gpu-kernels (the trainer's
# CubeCL kernels, run on burn's wgpu backend): Mesa's lavapipe Vulkan driver and the Vulkan
# loader (Debian's `mesa-vulkan-drivers` and `libvulkan1`, with apt-get, as root).
# Where it cannot install them, it says what to install and succeeds all the same: those tests
# then say they are skipped (HPTUNE_TEST_GPU_SOFT=required makes them fail instead). Idempotent.
set -euo pipefail

# Whether the Vulkan loader is in the loader's cache and lavapipe's manifest is installed.
has_lavapipe() {
  ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 ' &&
    compgen -G '/usr/share/vulkan/icd.d/lvp_icd*.json' >/dev/null
}

has_lavapipe && exit 0
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -qq >/dev/null &&
    apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null; then
    echo "installed Mesa's lavapipe Vulkan driver (mesa-vulkan-drivers, libvulkan1)" >&2
  else
    echo "could not install mesa-vulkan-drivers with apt-get: the GPU kernel tests are skipped" >&2
  fi
else
  echo "no Vulkan driver for the GPU kernel tests: install Mesa's lavapipe (Debian/Ubuntu:" \
    "apt-get install mesa-vulkan-drivers libvulkan1; Fedora: dnf install mesa-vulkan-drivers)" >&2
fi
