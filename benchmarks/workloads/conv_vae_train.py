"""A convolutional variational autoencoder trained on synthetic 128x128 RGB images.

Encoder of strided 4x4 convolutions with BatchNorm and LeakyReLU down to a 256-channel 8x8
latent, reparameterization, decoder of transposed convolutions back to 128x128, loss =
reconstruction MSE + KL term, Adam. fp32, NCHW, cudnn.benchmark left at its default (off).

Anti-patterns it carries:
  * NCHW activations around every (transposed) convolution -> fix: channels-last
  * cudnn.benchmark off: transposed convolutions especially depend on the algorithm picked
                                                            -> fix: cudnn-benchmark
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast

    python benchmarks/workloads/conv_vae_train.py [--batch-size 128] [--image-size 128] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def down(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 4, stride=2, padding=1), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2))


def up(cin, cout):
    return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(0.2))


class VAE(nn.Module):
    def __init__(self, widths=(64, 128, 256, 256), latent=256):
        super().__init__()
        layers, cin = [], 3
        for w in widths:
            layers.append(down(cin, w))
            cin = w
        self.encoder = nn.Sequential(*layers, nn.Conv2d(cin, cin, 3, padding=1), nn.LeakyReLU(0.2))
        self.to_mu = nn.Conv2d(cin, latent, 1)
        self.to_logvar = nn.Conv2d(cin, latent, 1)
        layers, cin = [nn.Conv2d(latent, widths[-1], 3, padding=1), nn.LeakyReLU(0.2)], widths[-1]
        for w in reversed(widths[:-1]):
            layers.append(up(cin, w))
            cin = w
        layers += [nn.ConvTranspose2d(cin, 32, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                   nn.Conv2d(32, 3, 3, padding=1), nn.Tanh()]
        self.decoder = nn.Sequential(*layers)

    def forward(self, x):
        h = self.encoder(x)
        mu, logvar = self.to_mu(h), self.to_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--beta", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        model = VAE(widths=(8, 16), latent=8)
        args.batch_size, args.image_size = 2, 32
    else:
        model = VAE()
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    data = torch.rand(8 * args.batch_size, 3, args.image_size, args.image_size, device=device) * 2 - 1

    t0 = time.time()
    for it in range(args.iters):
        x = data[(it % 8) * args.batch_size:(it % 8 + 1) * args.batch_size]
        recon, mu, logvar = model(x)
        rec = F.mse_loss(recon, x)
        kl = -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
        loss = rec + args.beta * kl
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} rec {rec.item():.4f} kl {kl.item():.2f} "
                  f"({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
