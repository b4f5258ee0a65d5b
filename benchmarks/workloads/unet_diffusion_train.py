"""Denoising-diffusion (DDPM) training of a small hand-written UNet on 64x64 images.

The UNet is the usual one from diffusion tutorials: sinusoidal timestep embedding, residual
blocks of GroupNorm + SiLU + 3x3 convolution, self-attention at the 16x16 and 8x8 levels, skip
connections, channel widths 128-256-256-512. Each step draws random timesteps, noises a batch of
synthetic images along a linear beta schedule and regresses the noise (MSE), with AdamW. fp32,
default NCHW layout, cudnn.benchmark left off.

Anti-patterns it carries:
  * NCHW activations around every convolution             -> fix: channels-last
  * fp32 training where bf16 mixed precision would do      -> fix: bf16-autocast
  * cudnn.benchmark off (the default)                      -> fix: cudnn-benchmark

    python benchmarks/workloads/unet_diffusion_train.py [--batch-size 32] [--image-size 64] [--iters N] [--small]
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim, groups=32):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.drop = nn.Dropout(0.1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        return h + self.skip(x)


class AttnBlock(nn.Module):
    def __init__(self, ch, groups=32):
        super().__init__()
        self.norm = nn.GroupNorm(groups, ch)
        self.qkv = nn.Conv2d(ch, ch * 3, 1)
        self.proj = nn.Conv2d(ch, ch, 1)

    def forward(self, x):
        B, C, H, W = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(B, 3, C, H * W).unbind(1)
        w = torch.softmax(torch.einsum("bci,bcj->bij", q, k) / math.sqrt(C), dim=-1)
        h = torch.einsum("bij,bcj->bci", w, v).reshape(B, C, H, W)
        return x + self.proj(h)


class UNet(nn.Module):
    def __init__(self, ch=128, mults=(1, 2, 2, 4), attn_levels=(2, 3), groups=32):
        super().__init__()
        tdim = ch * 4
        self.ch = ch
        self.temb = nn.Sequential(nn.Linear(ch, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.stem = nn.Conv2d(3, ch, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        chans, cur = [ch], ch
        for i, m in enumerate(mults):
            blocks = nn.ModuleList([ResBlock(cur, ch * m, tdim, groups), ResBlock(ch * m, ch * m, tdim, groups)])
            cur = ch * m
            attn = AttnBlock(cur, groups) if i in attn_levels else nn.Identity()
            down = nn.Conv2d(cur, cur, 3, stride=2, padding=1) if i < len(mults) - 1 else nn.Identity()
            self.down.append(nn.ModuleList([blocks, attn, down]))
            chans.append(cur)
        self.mid1, self.mid_attn, self.mid2 = ResBlock(cur, cur, tdim, groups), AttnBlock(cur, groups), \
            ResBlock(cur, cur, tdim, groups)
        for i, m in reversed(list(enumerate(mults))):
            skip = chans.pop()
            blocks = nn.ModuleList([ResBlock(cur + skip, ch * m, tdim, groups), ResBlock(ch * m, ch * m, tdim, groups)])
            cur = ch * m
            attn = AttnBlock(cur, groups) if i in attn_levels else nn.Identity()
            up = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(cur, cur, 3, padding=1)) \
                if i > 0 else nn.Identity()
            self.up.append(nn.ModuleList([blocks, attn, up]))
        self.out = nn.Sequential(nn.GroupNorm(groups, cur), nn.SiLU(), nn.Conv2d(cur, 3, 3, padding=1))

    def forward(self, x, t):
        temb = self.temb(timestep_embedding(t, self.ch))
        h = self.stem(x)
        skips = []
        for blocks, attn, down in self.down:
            for b in blocks:
                h = b(h, temb)
            h = attn(h)
            skips.append(h)
            h = down(h)
        h = self.mid2(self.mid_attn(self.mid1(h, temb)), temb)
        for blocks, attn, up in self.up:
            h = torch.cat([h, skips.pop()], dim=1)
            for b in blocks:
                h = b(h, temb)
            h = up(attn(h))
        return self.out(h)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--timesteps", type=int, default=1000)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        model = UNet(ch=16, mults=(1, 2), attn_levels=(1,), groups=4)
        args.batch_size, args.image_size = 2, 16
    else:
        model = UNet()
    model = model.to(device)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)

    betas = torch.linspace(1e-4, 0.02, args.timesteps, device=device)
    alphas_bar = torch.cumprod(1.0 - betas, dim=0)
    data = torch.rand(256 if not args.small else 4, 3, args.image_size, args.image_size, device=device) * 2 - 1

    t0 = time.time()
    for it in range(args.iters):
        idx = torch.randint(0, data.shape[0], (args.batch_size,), device=device)
        x0 = data[idx]
        t = torch.randint(0, args.timesteps, (args.batch_size,), device=device)
        noise = torch.randn_like(x0)
        a = alphas_bar[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        loss = F.mse_loss(model(xt, t), noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
