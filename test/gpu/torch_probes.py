"""torch_probes.py BUILD_DIR [graph] - a multi-kernel PyTorch workload whose kernels carry
PTX: a C++/CUDA extension (built once into BUILD_DIR with nvcc -arch=sm_90)
with three kernels, called in a loop from torch. Prints a checksum and the
launches/blocks of the extension's kernels, for the device-probe checks.

With "graph": the step is captured in a CUDA graph (torch's default, GLOBAL
capture mode) that stays open for 2.5 s, so the interposer's copy thread
runs during the capture, then replayed 8 times; prints
"torch_probes_graph ok checksum X" or the error."""
import sys
import time

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
if len(sys.argv) > 2 and sys.argv[2] == "graph":
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, as torch asks
        ext.step(a, b)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = ext.step(a, b)
            time.sleep(2.5)
        acc = torch.zeros(n, device="cuda")
        for _ in range(iters):
            graph.replay()
            acc = acc + out
        torch.cuda.synchronize()
        print("torch_probes_graph ok checksum %.4f" % acc.double().sum().item())
    except RuntimeError as e:
        print("torch_probes_graph failed: %s" % str(e).splitlines()[0])
    sys.exit(0)
acc = torch.zeros(n, device="cuda")
for _ in range(iters):
    acc = acc + ext.step(a, b)
torch.cuda.synchronize()
print("torch_probes_checksum %.4f" % acc.double().sum().item())
blocks = (n + 255) // 256
print("torch_probes_grid launches=%d blocks=%d" % (3 * iters, 3 * iters * blocks))
