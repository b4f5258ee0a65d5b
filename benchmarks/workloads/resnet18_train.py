"""ResNet-18 image classification training on synthetic ImageNet-shaped batches (torchvision).

The way most people first benchmark a CNN: torchvision's resnet18, fp32 weights and activations in
the default NCHW layout, SGD with momentum, cuDNN left at its defaults (benchmark mode off), one
fixed set of batches kept on the GPU.

Anti-patterns it carries:
  * NCHW (contiguous) activations: the Tensor Core convolution kernels want NHWC, so cuDNN inserts
    layout transposes around every convolution          -> fix: channels-last
  * fp32 training where bf16 mixed precision would do    -> fix: bf16-autocast
  * cudnn.benchmark off: cuDNN picks convolution algorithms by heuristic instead of timing them
                                                         -> fix: cudnn-benchmark
  * (a control for launch-bound claims: the GPU is busy, so replaying the step as CUDA graphs
    should give little)                                  -> fix: compile-cudagraphs

    python benchmarks/workloads/resnet18_train.py [--batch-size 128] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torchvision


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()
    if args.small:
        args.batch_size, args.image_size = 4, 64

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    model = torchvision.models.resnet18(num_classes=1000).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)

    # a handful of fixed synthetic batches, reused round-robin
    batches = [(torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device),
                torch.randint(0, 1000, (args.batch_size,), device=device)) for _ in range(4)]

    model.train()
    t0 = time.time()
    for it in range(args.iters):
        images, labels = batches[it % len(batches)]
        output = model(images)
        loss = criterion(output, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
