"""Whether bf16 weights still learn with the bundled optimizers: a small Llama trained with lr 1e-5 for 300
steps in fp32, then in bf16 with the optimizers' fp32 master weights (the default), with plain bf16 weights
(``master_weights=False``: each update rounded into the weight) and with bf16 weights rounded stochastically
(an fp32 update rounded up or down with the odds that keep its mean: what torchao's bf16 stochastic rounding
does, written here only to compare).

    python benchmarks/bf16_updates.py [--steps 300] [--lr 1e-5] [--smoke]

Prints, for FusedAdam, CAME and CAME8Bit: the final loss (the trained weights evaluated in fp32 on held-out
batches), how far the weights are from the fp32 run's ("apart": relative to how far that run moved them, and
to their norm), how far each run moved them, and the optimizer state's bytes per parameter (master weights
included) and dtypes. With
lr 1e-5 most updates are below half a bf16 ulp of their weight (2**-9 of it), so plain bf16 stalls.
The data: sequences from a fixed random Markov chain (the same batches for every run). No timing.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autotrain.optimizers import CAME, CAME8Bit, FusedAdam  # noqa: E402

OPTIMIZERS = {
    "fused_adam": lambda params, lr, **kw: FusedAdam(params, lr=lr, **kw),
    "came": lambda params, lr, **kw: CAME(params, lr=lr, compile=False, **kw),
    "came_8bit": lambda params, lr, **kw: CAME8Bit(params, lr=lr, compile=False, min_8bit_size=4096, **kw),
}
VARIANTS = ("fp32", "bf16 + fp32 master", "bf16 plain", "bf16 stochastic rounding")


def model(vocab: int, hidden: int, layers: int, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16).to(dtype)  # every run starts from the same (bf16) weights


def batches(count: int, vocab: int, batch: int, length: int, seed: int) -> list[torch.Tensor]:
    """Sequences of a Markov chain whose next token is one of four per token (fixed by seed 0)."""
    table = torch.randint(0, vocab, (vocab, 4), generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        tokens = torch.empty(batch, length, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
        for t in range(1, length):
            tokens[:, t] = table[tokens[:, t - 1], torch.randint(0, 4, (batch,), generator=gen)]
        out.append(tokens)
    return out


def stochastic_round_(opt: torch.optim.Optimizer) -> None:
    """Each fp32 master weight rounded to bf16, up or down with the odds that keep its mean, as the weights
    would be stored without a master copy."""
    for state in opt.state.values():
        master = state.get("master_param")
        if master is None:
            continue
        bits = master.view(torch.int32)
        noise = torch.randint(0, 1 << 16, master.shape, dtype=torch.int32, device=master.device)
        master.copy_(((bits + noise) & -65536).view(torch.float32))  # exactly a bf16 value


def train(name: str, variant: str, data: list, args) -> tuple[dict[str, torch.Tensor], torch.optim.Optimizer]:
    net = model(args.vocab, args.hidden, args.layers, torch.float32 if variant == "fp32" else torch.bfloat16)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = OPTIMIZERS[name](params, args.lr, **({"master_weights": False} if variant == "bf16 plain" else {}))
    for tokens in data:
        loss = net(input_ids=tokens, labels=tokens).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if variant == "bf16 stochastic rounding":
            stochastic_round_(opt)
            for p in params:  # the weights are what was stored
                p.data.copy_(opt.state[p]["master_param"])
    return {n: p.detach().float().clone() for n, p in net.named_parameters()}, opt


def eval_loss(weights: dict[str, torch.Tensor], held_out: list, args) -> float:
    net = model(args.vocab, args.hidden, args.layers, torch.float32)
    net.load_state_dict(weights)
    with torch.no_grad():
        return sum(net(input_ids=t, labels=t).loss.item() for t in held_out) / len(held_out)


def distance(a: dict, b: dict) -> float:
    return sum(((a[k] - b[k]) ** 2).sum() for k in a).sqrt().item()


def state_summary(opt: torch.optim.Optimizer, params: int, master: bool) -> tuple[float, str]:
    """Bytes of state per parameter (the master weights counted where kept) and the state's dtypes."""
    skip = ("step",) if master else ("step", "master_param")
    tensors = [v for s in opt.state.values() for k, v in s.items() if isinstance(v, torch.Tensor) and k not in skip]
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors if t.numel() > 1})
    return sum(t.nbytes for t in tensors) / params, "/".join(dtypes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--smoke", action="store_true", help="10 steps of a smaller model: checks the script runs")
    args = parser.parse_args()
    args.vocab, args.hidden, args.layers, batch, length = 256, 64, 2, 8, 64
    if args.smoke:
        args.steps, args.hidden, batch, length = 10, 32, 2, 16
    torch.set_num_threads(min(2, torch.get_num_threads()))
    data = batches(args.steps, args.vocab, batch, length, seed=1)
    held_out = batches(4, args.vocab, batch, length, seed=2)
    start = {
        n: p.detach().float().clone()
        for n, p in model(args.vocab, args.hidden, args.layers, torch.float32).named_parameters()
    }
    params = sum(t.numel() for t in start.values())
    before = eval_loss(start, held_out, args)
    print(f"{params} parameters, lr {args.lr}, {args.steps} steps; loss before training {before:.4f}")
    print("optimizer   variant                    final loss  apart/moved  apart/|w|  moved/moved(fp32)  state B/param")
    for name in OPTIMIZERS:
        reference, reference_opt = train(name, "fp32", data, args)
        moved = distance(reference, start)
        for variant in VARIANTS:
            weights, opt = (reference, reference_opt) if variant == "fp32" else train(name, variant, data, args)
            # Stochastic rounding keeps no master weights: this script only borrows them to round from.
            per_param, dtypes = state_summary(opt, params, master=variant != "bf16 stochastic rounding")
            apart = distance(weights, reference)
            norm = sum((w**2).sum() for w in reference.values()).sqrt().item()
            print(
                f"{name:11s} {variant:26s} {eval_loss(weights, held_out, args):10.4f}  {apart / moved:11.3f}  "
                f"{apart / norm:9.1e}  {distance(weights, start) / moved:17.3f}  {per_param:6.2f} ({dtypes})"
            )


if __name__ == "__main__":
    main()
