"""torch_probes.py BUILD_DIR - a multi-kernel PyTorch workload whose kernels carry
PTX: a C++/CUDA extension (built once into BUILD_DIR with nvcc -arch=sm_90)
with three kernels, called in a loop from torch. Prints a checksum and the
launches/blocks of the extension's kernels, for the device-probe checks."""
import sys

import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
__global__ void k_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
__global__ void k_relu(float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n && c[i] < 0.f) c[i] = 0.f; }
__global__ void k_scale(float* c, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] *= s; }
torch::Tensor step(torch::Tensor a, torch::Tensor b) {
  auto c = torch::empty_like(a); int n = a.numel(), t = 256, g = (n + t - 1) / t;
  k_add<<<g, t>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
  k_relu<<<g, t>>>(c.data_ptr<float>(), n);
  k_scale<<<g, t>>>(c.data_ptr<float>(), 0.5f, n);
  return c; }
"""

ext = load_inline(name="gpuext_probe_ext", cpp_sources="torch::Tensor step(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=SRC, functions=["step"], extra_cuda_cflags=["-arch=sm_90"],
                  build_directory=sys.argv[1], verbose=False)
n, iters = 1 << 20, 8
g = torch.Generator(device="cpu").manual_seed(7)
a = torch.randn(n, generator=g).cuda()
b = torch.randn(n, generator=g).cuda()
acc = torch.zeros(n, device="cuda")
for _ in range(iters):
    acc = acc + ext.step(a, b)
torch.cuda.synchronize()
print("torch_probes_checksum %.4f" % acc.double().sum().item())
blocks = (n + 255) // 256
print("torch_probes_grid launches=%d blocks=%d" % (3 * iters, 3 * iters * blocks))
