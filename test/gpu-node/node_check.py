#!/usr/bin/env python3
"""node_check.py - what a container on the GPU node runs (test/gpu-node/gpu-node.sh).

Roles (the first argument), each printing "key value ..." lines that the shell
reads; nothing is pass/fail here:

  quota BYTES RESDIR    what the container sees of its quota: the GPU count,
                        torch.cuda.mem_get_info(), nvidia-smi's memory total,
                        an allocation past the quota (the framework's
                        out-of-memory error expected), the seeded training
                        loop's loss; then holds 1 GiB until RESDIR/release
                        appears and tries to pass the quota once more
                        (after the agent was killed and restarted).
  train                 the seeded training loop alone (run on the host, out
                        of any container, for the same-loss check).
  resnet SECONDS        ResNet-50 training steps (batch 32, fp32) for SECONDS
                        after warm-up: prints steps/s.
  generate SECONDS      a transformers causal LM (GPT-2 shape, random weights,
                        no download) generating 32 tokens per call: calls/s.
  launches N            N small torch kernels (host-side launch observation).
"""
import os
import subprocess
import sys
import time

import torch

GiB = 1 << 30


def say(*a):
    print(*a, flush=True)


def train_loss(steps=200):
    torch.manual_seed(1234)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator(device="cpu").manual_seed(99)
    x = torch.randn(256, 512, generator=g).cuda()
    y = torch.randint(0, 10, (256,), generator=g).cuda()
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return float(loss.item())


def over_quota(quota):
    """Allocate past the quota in 512 MiB pieces: the error the framework raises."""
    held = []
    try:
        for _ in range(quota // (512 << 20) + 4):
            held.append(torch.empty(512 << 20, dtype=torch.uint8, device="cuda"))
        return "none", len(held) * (512 << 20)
    except torch.OutOfMemoryError:
        return "OutOfMemoryError", len(held) * (512 << 20)
    except Exception as e:  # anything else is a finding too
        return type(e).__name__, len(held) * (512 << 20)
    finally:
        del held
        torch.cuda.empty_cache()


def quota(q, resdir):
    say("devices", torch.cuda.device_count())
    free, total = torch.cuda.mem_get_info()
    say("mem_get_info", free, total)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
        say("nvidia_smi_total_mib", smi.stdout.strip().replace("\n", ",") or "none", smi.returncode)
    except Exception as e:
        say("nvidia_smi_total_mib", "none", type(e).__name__)
    err, got = over_quota(q)
    say("over_quota", err, got)
    say("loss", "%.6f" % train_loss())
    hold = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    hold.fill_(1)
    torch.cuda.synchronize()
    say("holding", GiB)
    for _ in range(600):
        if os.path.exists(os.path.join(resdir, "release")):
            break
        time.sleep(0.2)
    err, got = over_quota(q - GiB)
    say("over_quota_after", err, got)
    del hold
    say("done")


def resnet(seconds):
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    torch.cuda.synchronize()
    say("resnet_steps_per_s", "%.3f" % (n / (time.perf_counter() - t0)))


def generate(seconds):
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257)
    m = transformers.GPT2LMHeadModel(cfg).cuda().eval().half()
    ids = torch.randint(0, cfg.vocab_size, (4, 64), device="cuda")
    mask = torch.ones_like(ids)

    def call():
        with torch.inference_mode():
            m.generate(ids, attention_mask=mask, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)

    for _ in range(2):
        call()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        call()
        n += 1
    torch.cuda.synchronize()
    say("generate_calls_per_s", "%.3f" % (n / (time.perf_counter() - t0)))


def launches(n):
    x = torch.ones(1024, device="cuda")
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    say("launches", n, "value", float(x[0].item()))


def main():
    role = sys.argv[1]
    if role == "quota":
        quota(int(sys.argv[2]), sys.argv[3])
    elif role == "train":
        say("loss", "%.6f" % train_loss())
    elif role == "resnet":
        resnet(float(sys.argv[2]))
    elif role == "generate":
        generate(float(sys.argv[2]))
    elif role == "launches":
        launches(int(sys.argv[2]))
    else:
        sys.exit("unknown role " + role)


if __name__ == "__main__":
    main()
