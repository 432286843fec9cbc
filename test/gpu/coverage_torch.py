"""coverage_torch.py - the PyTorch workload of the probe-coverage checks
(test/gpu/probe_coverage.sh): a small transformer encoder's forward pass,
eager and replayed from a CUDA graph, with fixed shapes and seed so that two
runs launch the same kernels.

  coverage_torch.py eager N   3 warm-up forwards, then N; prints
                              "coverage_eager n=N checksum=..."
  coverage_torch.py graph R   3 warm-up forwards on a side stream, one forward
                              captured into a CUDA graph, R replays; prints
                              "coverage_graph r=R checksum=..."
  coverage_torch.py prof      without the interposer: the kernels one eager
                              forward and one graph replay launch, counted by
                              torch.profiler (CUPTI); prints
                              "coverage_prof eager=K graph=G" (or "coverage_prof
                              unavailable: WHY")
"""
import sys

import torch

WARMUP = 3


def model_and_input():
    torch.manual_seed(7)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False).cuda().eval()
    x = torch.randn(8, 128, 256, device="cuda")
    return model, x


def checksum(y):
    return f"{y.double().abs().sum().item():.6e}"


def eager(n):
    model, x = model_and_input()
    with torch.no_grad():
        for _ in range(WARMUP):
            y = model(x)
        for _ in range(n):
            y = model(x)
    torch.cuda.synchronize()
    print(f"coverage_eager n={n} checksum={checksum(y)}")


def captured():
    model, x = model_and_input()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(s):
            for _ in range(WARMUP):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = model(x)
    torch.cuda.synchronize()
    return g, y


def graph(r):
    g, y = captured()
    for _ in range(r):
        g.replay()
    torch.cuda.synchronize()
    print(f"coverage_graph r={r} checksum={checksum(y)}")


def kernels(prof):
    n = 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")):
            n += 1
    return n


def prof():
    from torch.profiler import ProfilerActivity, profile

    try:
        model, x = model_and_input()
        with torch.no_grad():
            for _ in range(WARMUP):
                model(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                model(x)
                torch.cuda.synchronize()
        k = kernels(p)
        g, _ = captured()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            g.replay()
            torch.cuda.synchronize()
        print(f"coverage_prof eager={k} graph={kernels(p)}")
    except Exception as e:  # the check falls back to the runs' own linearity
        print(f"coverage_prof unavailable: {type(e).__name__}: {e}".replace("\n", " "))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "eager":
        eager(int(sys.argv[2]))
    elif mode == "graph":
        graph(int(sys.argv[2]))
    elif mode == "prof":
        prof()
    else:
        sys.exit(f"unknown mode {mode}")
