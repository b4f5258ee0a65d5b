"""Batched greedy generation with Hugging Face ``model.generate`` and its default (dynamic) KV cache.

A Llama-style model built from a ``LlamaConfig`` in code (8 layers, 1024 wide, 32000 vocabulary,
random weights, no download) serves requests in a loop: each request is a batch of 128-token
prompts answered with 16 new tokens by ``model.generate``. The model is left in fp32, as
``from_config`` makes it. One perfstack step per request.

Anti-patterns it carries:
  * the default DynamicCache grows its tensors with torch.cat every token and gives every decode
    step new shapes                                          -> fix: static-kv-cache
  * eager decoding is launch-bound: hundreds of small kernels per token with Python in between
                                                             -> fix: compile
  * fp32 weights and matmuls where bf16 would do             -> fix: bf16-autocast

    python benchmarks/workloads/hf_generate.py [--batch-size 1|32] [--max-new-tokens 16] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

try:
    import perfstack
    step = perfstack.step
except (ImportError, AttributeError):  # outside perfstack a step marker does nothing
    def step():
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000, help="requests to serve")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                             bos_token_id=1, eos_token_id=2, pad_token_id=0)
        args.prompt_len, args.max_new_tokens = 8, 4
    else:
        config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                             num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048,
                             bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(config).to(device)
    model.eval()

    t0 = time.time()
    for it in range(args.iters):
        prompts = torch.randint(3, config.vocab_size, (args.batch_size, args.prompt_len), device=device)
        with torch.no_grad():
            out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts),
                                 max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                                 do_sample=False, pad_token_id=config.pad_token_id)
        step()
        if it % args.log_every == 0:
            print(f"request {it}: {tuple(out.shape)} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
