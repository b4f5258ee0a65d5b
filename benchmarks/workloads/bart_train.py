"""BART (bart-base sizes) summarization-style training from a config (transformers, random init).

``BartForConditionalGeneration`` from a ``BartConfig`` built in code: 6+6 layers, d_model 768,
50265 vocabulary. Random article (512 tokens) and summary (128 tokens) ids with padding masks,
AdamW with a linear decay, fp32.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do            -> fix: bf16-autocast
  * eager mode: LayerNorm, GELU, dropout, embedding scaling as separate kernels -> fix: compile
  * fp32 matmuls at full precision (TF32 off by default)         -> fix: tf32

    python benchmarks/workloads/bart_train.py [--batch-size 16] [--src-len 512] [--tgt-len 128] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import BartConfig, BartForConditionalGeneration


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--src-len", type=int, default=512)
    p.add_argument("--tgt-len", type=int, default=128)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = BartConfig(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                            decoder_ffn_dim=128, max_position_embeddings=128)
        args.batch_size, args.src_len, args.tgt_len = 2, 32, 16
    else:
        config = BartConfig(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6,
                            encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                            decoder_ffn_dim=3072, max_position_embeddings=1024)
    model = BartForConditionalGeneration(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.0,
                                                  total_iters=max(args.iters, 1))
    pad = config.pad_token_id

    t0 = time.time()
    for it in range(args.iters):
        src = torch.randint(4, config.vocab_size, (args.batch_size, args.src_len), device=device)
        src_len = torch.randint(args.src_len // 2, args.src_len + 1, (args.batch_size, 1), device=device)
        src_mask = (torch.arange(args.src_len, device=device)[None, :] < src_len).long()
        src = src.masked_fill(src_mask == 0, pad)
        labels = torch.randint(4, config.vocab_size, (args.batch_size, args.tgt_len), device=device)
        loss = model(input_ids=src, attention_mask=src_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
