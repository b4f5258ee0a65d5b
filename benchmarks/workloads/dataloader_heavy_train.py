"""Image classification whose input pipeline does heavy CPU augmentation in the training process.

A ``Dataset`` "decodes" a 288x288 uint8 image per index (synthetic, seeded by the index), then
augments it on the CPU with torch ops: random resized crop to 224, horizontal flip, colour jitter
(brightness, contrast, saturation), normalization. The ``DataLoader`` uses the defaults people
start from: ``num_workers=0``, ``pin_memory=False``. The model is a small residual CNN, so the
GPU finishes each batch long before the next one is ready.

Anti-patterns it carries:
  * all decoding and augmentation on the training process's main thread (num_workers=0): the GPU
    waits for every batch                                   -> fix: dataloader-workers
  * pageable host memory for the batches (pin_memory=False) -> fix: pin-memory
  * torch's CPU ops use every core per op from one process, tiny ops thrash threads
                                                            -> fix: omp-threads
  * many short-lived host allocations per sample with glibc malloc -> fix: jemalloc

    python benchmarks/workloads/dataloader_heavy_train.py [--batch-size 24] [--iters N] [--small]
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class SyntheticImageFolder(Dataset):
    def __init__(self, n, raw_size=288, out_size=224, num_classes=100):
        self.n, self.raw_size, self.out_size, self.num_classes = n, raw_size, out_size, num_classes

    def __len__(self):
        return self.n

    def decode(self, index):
        rng = np.random.default_rng(index)
        # a smooth-ish image: low-resolution noise upsampled, plus fine noise
        base = rng.integers(0, 256, (3, self.raw_size // 8, self.raw_size // 8), dtype=np.uint8)
        img = np.repeat(np.repeat(base, 8, axis=1), 8, axis=2)
        img = np.clip(img.astype(np.int16) + rng.integers(-20, 21, img.shape), 0, 255).astype(np.uint8)
        return torch.from_numpy(img), int(rng.integers(0, self.num_classes))

    def augment(self, img):
        img = img.float() / 255.0
        _, h, w = img.shape
        scale = float(torch.empty(1).uniform_(0.35, 1.0))
        ch, cw = max(8, int(h * scale ** 0.5)), max(8, int(w * scale ** 0.5))
        top = int(torch.randint(0, h - ch + 1, (1,)))
        left = int(torch.randint(0, w - cw + 1, (1,)))
        img = img[:, top:top + ch, left:left + cw]
        img = F.interpolate(img[None], size=(self.out_size, self.out_size), mode="bilinear",
                            align_corners=False, antialias=True)[0]
        if torch.rand(1) < 0.5:
            img = img.flip(-1)
        b, c, s = (float(v) for v in torch.empty(3).uniform_(0.6, 1.4))
        img = img * b
        img = (img - img.mean()) * c + img.mean()
        gray = (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]
        img = (img - gray) * s + gray
        img = img.clamp(0, 1)
        return (img - MEAN) / STD

    def __getitem__(self, index):
        img, label = self.decode(index)
        return self.augment(img), label


class SmallResNet(nn.Module):
    def __init__(self, num_classes=100, width=64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=4, padding=3), nn.BatchNorm2d(width), nn.ReLU())
        layers, c = [], width
        for out in (width, 2 * width, 4 * width):
            layers += [nn.Conv2d(c, out, 3, stride=2, padding=1), nn.BatchNorm2d(out), nn.ReLU(),
                       nn.Conv2d(out, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU()]
            c = out
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(self.body(self.stem(x)).mean((2, 3)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=24)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        dataset = SyntheticImageFolder(64, raw_size=48, out_size=32, num_classes=10)
        model = SmallResNet(num_classes=10, width=8)
        args.batch_size = 4
    else:
        dataset = SyntheticImageFolder(100000)
        model = SmallResNet()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = model.to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)

    it = 0
    t0 = time.time()
    while it < args.iters:
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if it % args.log_every == 0:
                print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)
            it += 1
            if it >= args.iters:
                break


if __name__ == "__main__":
    main()
