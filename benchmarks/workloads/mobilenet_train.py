"""MobileNetV3-Large training (torchvision) on synthetic batches, fp32 NCHW.

Depthwise-separable convolutions are many small kernels with little arithmetic each, which makes
this network sensitive to layout, to algorithm choice and to per-kernel launch overhead.

Anti-patterns it carries:
  * NCHW activations; depthwise convolutions are much faster in NHWC -> fix: channels-last
  * cudnn.benchmark off (the default)                                 -> fix: cudnn-benchmark
  * eager mode over many small element-wise ops (hardswish, SE blocks, BN) -> fix: compile

    python benchmarks/workloads/mobilenet_train.py [--batch-size 128] [--iters N] [--small]
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
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()
    if args.small:
        args.batch_size, args.image_size = 4, 64

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    model = torchvision.models.mobilenet_v3_large(num_classes=1000).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=0.064, alpha=0.9, eps=0.0316, momentum=0.9,
                                    weight_decay=1e-5)

    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)

    model.train()
    t0 = time.time()
    for it in range(args.iters):
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
