#!/usr/bin/env python3
"""prio_torch.py - the priority test with real frameworks (make gpu-test, section priority-torch).

Two roles, one process each, started by test/gpu/gpu-test.sh:

  lc SECONDS PERIOD_US   latency-critical inference: a 12-layer fp16 MLP served
                         every PERIOD_US, alternating a CUDA-graph request (one
                         graph replay) and an eager one (the same layers, one
                         launch each). Prints per kind p50/p99 in us and the
                         measured window on CLOCK_MONOTONIC.
  be MODEL               best-effort training until SIGTERM: MODEL is resnet50
                         (torchvision, batch 64, bf16 autocast; fp32 with
                         GPUEXT_TORCH_BE_DTYPE=fp32) or gcn
                         (torch-geometric, 3 GCNConv layers, full batch on a
                         random graph). Prints "be_ready" after warm-up, then
                         "be_tick <monotonic us> <steps>" after every step
                         (the step's loss read back, as a training loop does).
  finite DTYPE STEPS     seeded ResNet-50 training steps (bf16 autocast or
                         fp32): prints the losses and how many forward
                         outputs were not finite, for the mps-share-finite
                         check (an MPS thread-percentage limit against none).

Lines are "key value ..." for the shell to read; nothing is pass/fail here.
"""
import os
import signal
import sys
import time

import torch


def mono_us():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def lc(seconds, period_us):
    torch.manual_seed(0)
    width, batch, layers = 4096, 32, 12
    mlp = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])
    mlp = mlp.half().cuda().eval()
    x = torch.randn(batch, width, device="cuda", dtype=torch.half)
    with torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                mlp(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = mlp(x)
        for _ in range(20):  # warm-up: both kinds
            g.replay()
            mlp(x)
        torch.cuda.synchronize()
        ref = mlp(x).float()
        g.replay()
        torch.cuda.synchronize()
        if not torch.allclose(y.float(), ref, rtol=1e-2, atol=1e-2):
            print("lc_error graph output differs from eager", flush=True)
            sys.exit(1)
        lat = {"graph": [], "eager": []}
        t0 = mono_us()
        nxt = time.perf_counter_ns()
        end = nxt + int(seconds * 1e9)
        i = 0
        while True:
            now = time.perf_counter_ns()
            if now >= end:
                break
            if now < nxt:
                time.sleep((nxt - now) / 1e9)
            kind = "graph" if i % 2 == 0 else "eager"
            a = time.perf_counter_ns()
            if kind == "graph":
                g.replay()
            else:
                mlp(x)
            torch.cuda.synchronize()
            lat[kind].append((time.perf_counter_ns() - a) / 1000.0)
            nxt += period_us * 1000
            i += 1
        t1 = mono_us()
    for kind, xs in lat.items():
        print(f"lc_{kind}_n {len(xs)}")
        print(f"lc_{kind}_p50_us {pct(xs, 0.50):.1f}")
        print(f"lc_{kind}_p99_us {pct(xs, 0.99):.1f}")
    print(f"lc_window_us {t0} {t1}", flush=True)


def be(model):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    torch.manual_seed(1)
    if model == "resnet50":
        import torchvision

        net = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        data = torch.randn(64, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        target = torch.randint(0, 1000, (64,), device="cuda")

        def step():
            # GPUEXT_TORCH_BE_DTYPE=fp32 trains without autocast: bf16
            # convolutions under an MPS thread-percentage limit return
            # non-finite outputs on the H200's driver (docs/benchmarks.md)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=os.environ.get("GPUEXT_TORCH_BE_DTYPE", "bf16") == "bf16"):
                loss = torch.nn.functional.cross_entropy(net(data), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
    elif model == "gcn":
        from torch_geometric.nn import GCNConv

        n, e, feat, hid, classes = 100_000, 2_000_000, 256, 256, 16
        x = torch.randn(n, feat, device="cuda")
        edge_index = torch.randint(0, n, (2, e), device="cuda")
        y = torch.randint(0, classes, (n,), device="cuda")

        class GCN(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.convs = torch.nn.ModuleList([GCNConv(feat, hid), GCNConv(hid, hid), GCNConv(hid, classes)])

            def forward(self, x, ei):
                for i, c in enumerate(self.convs):
                    x = c(x, ei)
                    if i < len(self.convs) - 1:
                        x = torch.relu(x)
                return x

        net = GCN().cuda()
        opt = torch.optim.Adam(net.parameters(), lr=0.01)

        def step():
            loss = torch.nn.functional.cross_entropy(net(x, edge_index), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
    else:
        sys.exit(f"be: unknown model {model!r} (want resnet50 or gcn)")
    for _ in range(5):
        step().item()
    print("be_ready", flush=True)
    n = 0
    while not stop:
        v = step().item()
        if v != v:
            print("be_error loss is NaN", flush=True)
            sys.exit(1)
        n += 1
        print(f"be_tick {mono_us()} {n}", flush=True)


def finite(dtype, steps):
    """Seeded ResNet-50 training steps: each step's loss, and whether the
    forward pass's output was finite. The same seed gives the same numbers
    on a whole GPU, so runs under an MPS share can be compared with one
    without."""
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    data = torch.randn(64, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (64,), device="cuda")
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    out, bad = [], 0
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            y = net(data)
            loss = torch.nn.functional.cross_entropy(y, target)
        if not torch.isfinite(y).all().item():
            bad += 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(f"{loss.item():.3f}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"finite dtype={dtype} sms={sms} nonfinite_steps={bad}/{steps} losses={','.join(out)}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "finite":
        finite(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "lc":
        lc(float(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "be":
        be(sys.argv[2])
    else:
        sys.exit(__doc__)
