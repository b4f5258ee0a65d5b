"""A small Vision Transformer written from scratch (ViT-S/16 sized), the tutorial way.

Patch embedding by a strided convolution, pre-norm blocks whose attention is written out by hand
(``q @ k.transpose`` then softmax then ``@ v``), a class token, AdamW with the PyTorch defaults.
Trained in fp32 on synthetic 224x224 batches.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * attention materialized as a (B, H, 197, 197) score matrix plus separate softmax, scale and
    dropout kernels; eager element-wise chains everywhere   -> fix: compile
  * the optimizer step runs per-tensor kernels over ~150 parameter tensors -> fix: fused-optimizer

    python benchmarks/workloads/vit_scratch_train.py [--batch-size 64] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4.0, dropout=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        x = x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(self.norm2(x))))))
        return x


class ViT(nn.Module):
    def __init__(self, image_size=224, patch=16, dim=384, depth=12, heads=6, num_classes=1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        n = (image_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        args.batch_size = 2
        model = ViT(image_size=32, dim=64, depth=2, heads=2, num_classes=10)
        image_size, classes = 32, 10
    else:
        model = ViT()
        image_size, classes = 224, 1000
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)

    images = torch.randn(args.batch_size, 3, image_size, image_size, device=device)
    labels = torch.randint(0, classes, (args.batch_size,), device=device)

    t0 = time.time()
    for it in range(args.iters):
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
