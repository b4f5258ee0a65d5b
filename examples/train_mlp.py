"""A small training script to try `perfstack profile` on, unmodified:

    perfstack profile -- python examples/train_mlp.py --steps 30

It trains an MLP on random data with a DataLoader that has no workers and a pageable batch copy,
two problems the profile should rank.
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--width", type=int, default=4096)
args = ap.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(args.width, args.width), nn.GELU())]).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
data = torch.utils.data.TensorDataset(torch.randn(args.steps * 256, args.width))
loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True)

for step, (x,) in enumerate(loader):
    with torch.autocast(device, torch.bfloat16, enabled=device == "cuda"):
        loss = model(x.to(device)).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
