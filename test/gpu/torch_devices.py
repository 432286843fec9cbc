"""torch_devices.py - the GPUs PyTorch sees (test/gpu/multi_gpu.sh).

Prints one line for the count and one per device, in torch's order:
  torch_devices N
  torch_dev I uuid=GPU-... pci=DOMAIN:BUS:DEVICE.0 free=BYTES total=BYTES
uuid and pci as nvidia-smi writes them (lower case), so the script can
compare the orders; free/total are torch.cuda.mem_get_info(I), which the
device runtime clamps to the tenant's quota on that device.
"""
import torch

n = torch.cuda.device_count()
print(f"torch_devices {n}")
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    uuid = str(getattr(p, "uuid", "")).lower()
    if uuid and not uuid.startswith("gpu-"):
        uuid = "gpu-" + uuid
    pci = "-"
    if hasattr(p, "pci_bus_id"):
        pci = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    free, total = torch.cuda.mem_get_info(i)
    print(f"torch_dev {i} uuid={uuid.replace('gpu-', 'GPU-', 1)} pci={pci} free={free} total={total}")
