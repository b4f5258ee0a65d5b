"""ResNet-50 training, fp32 NCHW, with cuDNN benchmark mode switched off "for reproducibility".

A typical ImageNet-style training loop on synthetic data: torchvision resnet50, SGD with
momentum and a cosine learning-rate schedule, labels smoothed, everything in fp32 and in the
default NCHW layout. The script sets ``torch.backends.cudnn.benchmark = False`` itself, as many
training templates do.

Anti-patterns it carries:
  * NCHW activations around every convolution            -> fix: channels-last
  * fp32 everywhere                                       -> fix: bf16-autocast
  * cudnn.benchmark explicitly off                        -> fix: cudnn-benchmark
  * fp32 matmuls in full precision (the classifier head; convolutions already use TF32 by
    default, so little is expected here)                  -> fix: tf32
  * (a control for launch-bound claims: the GPU is busy, so replaying the step as CUDA graphs
    should give little)                                   -> fix: compile-cudagraphs

    python benchmarks/workloads/resnet50_train.py [--batch-size 64] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torchvision

torch.backends.cudnn.benchmark = False  # same algorithms every run


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()
    if args.small:
        args.batch_size, args.image_size = 2, 64

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    model = torchvision.models.resnet50(weights=None).to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5, nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(args.iters, 1))

    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)

    model.train()
    t0 = time.time()
    for it in range(args.iters):
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f} "
                  f"({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
