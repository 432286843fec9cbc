"""memguard_case.py - run one escape attempt of make gpu-test's memguard
section and say what stopped it, as one JSON line.

  python3 memguard_case.py --cgroup DIR --quota BYTES [--timeout S] [--env K=V]... [--unset K]... -- CMD...

CMD runs in cgroup DIR (a tenant's) and prints one line per allocation step
("alloc|create BYTES ok|oom|rc=N", test/gpu/apps.cu and escape.c). The
case notes when the allocations that succeeded first exceed the quota
(over_at), then waits for the process to end (or the timeout): a SIGKILL
after the overrun is the memory guard; an "oom" line with nothing over the
quota is the device runtime refusing it.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgroup", required=True)
    ap.add_argument("--quota", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=15.0)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--unset", action="append", default=[])
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    env = dict(os.environ)
    for k in a.unset:
        env.pop(k, None)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v

    def join():
        with open(os.path.join(a.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, preexec_fn=join, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    res = {"pid": p.pid, "lines": [], "over_at_ms": None, "refused": False}
    held = 0

    def reader():
        nonlocal held
        for line in p.stdout:
            line = line.strip()
            t = (time.monotonic() - start) * 1000
            res["lines"].append(line)
            parts = line.split()
            if len(parts) >= 3 and parts[0] in ("alloc", "create"):
                if parts[2] == "ok":
                    held += int(parts[1])
                    if held > a.quota and res["over_at_ms"] is None:
                        res["over_at_ms"] = round(t, 1)
                elif parts[2] in ("oom", "CUDA_ERROR_OUT_OF_MEMORY"):
                    res["refused"] = True
            elif line == "hold" and res["refused"]:
                refused_hold.set()

    refused_hold = threading.Event()
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    rc = None
    deadline = start + a.timeout
    while time.monotonic() < deadline:
        try:
            rc = p.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        if refused_hold.is_set():
            # refused and holding what fit: give the guard a few samples
            # to show it leaves a tenant within its quota alone
            try:
                rc = p.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            break
    if rc is None:
        p.kill()
        p.wait()
    end = (time.monotonic() - start) * 1000
    th.join(timeout=2)
    res["rc"] = rc
    res["end_ms"] = round(end, 1)
    res["killed"] = rc == -9
    res["held_bytes"] = held
    if res["killed"] and res["over_at_ms"] is not None:
        res["over_to_stop_ms"] = round(end - res["over_at_ms"], 1)
    if res["killed"] and res["over_at_ms"] is not None:
        res["layer"] = "memory-guard"
    elif res["refused"] and held <= a.quota:
        res["layer"] = "device-runtime"
    else:
        res["layer"] = "none"
    print(json.dumps(res))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
