"""torch_check.py - PyTorch under the device runtime (test/gpu/gpu-test.sh).

Prints result lines: a matmul checksum (must match a run without the
interposer), what torch.cuda.mem_get_info() reports, and whether allocating
past the quota fails with an out-of-memory error.
"""
import sys

import torch

quota = int(sys.argv[1]) if len(sys.argv) > 1 else 0
torch.manual_seed(0)
a = torch.randn(1024, 1024, device="cuda")
print(f"torch_checksum {float((a @ a).double().sum()):.6e}")
free, total = torch.cuda.mem_get_info()
print(f"torch_meminfo free={free} total={total}")
if quota:
    try:
        x = torch.empty(quota + (256 << 20), dtype=torch.uint8, device="cuda")
        print("torch_over_quota allocated")
    except torch.cuda.OutOfMemoryError:
        print("torch_over_quota oom")
