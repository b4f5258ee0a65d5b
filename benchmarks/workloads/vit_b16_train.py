"""Vision Transformer ViT-B/16 training (torchvision vit_b_16), fp32, AdamW.

torchvision's ViT-B/16 at 224x224 (197 tokens), trained from scratch on synthetic batches with
AdamW and gradient clipping, in fp32 with PyTorch's default matmul precision (full fp32, no TF32).

Anti-patterns it carries:
  * fp32 matmuls at full precision (TF32 off by default)  -> fix: tf32
  * fp32 training where bf16 mixed precision would do      -> fix: bf16-autocast
  * eager mode: LayerNorm, GELU, dropout and residual adds run as separate kernels -> fix: compile

    python benchmarks/workloads/vit_b16_train.py [--batch-size 32] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torchvision


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    if args.small:
        args.batch_size = 2
        model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                                     hidden_dim=64, mlp_dim=128, num_classes=1000)
        image_size = 32
    else:
        model = torchvision.models.vit_b_16(weights=None)
        image_size = 224
    model = model.to(device)

    criterion = nn.CrossEntropyLoss(label_smoothing=0.11)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.3)

    images = torch.randn(args.batch_size, 3, image_size, image_size, device=device)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)

    model.train()
    t0 = time.time()
    for it in range(args.iters):
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
