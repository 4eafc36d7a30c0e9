"""The chunked cross-entropy (autotrain.training.lm_loss): the loss and gradients of the plain computation on
full logits, from the last hidden states and the output head, a bounded chunk of tokens at a time; the models
and settings it refuses (they keep the plain path, with a note); the trainers that use it."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from autotrain.training import lm_loss
from autotrain.training.chunked_loss import CHUNK_BYTES, chunk_tokens, extra_peak_bytes, full_extra_peak_bytes
from autotrain.training.lm_loss import ChunkedCrossEntropy, causal_lm_loss, head_problem, summed_cross_entropy

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = str(Path(__file__).parent / "assets" / "tiny-llama")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative difference of two tensors: |a - b| / |b| (norms)."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _problem(n=300, h=32, v=1000, dtype=torch.float32, bias=False):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, h, generator=gen).to(dtype).requires_grad_()
    weight = (0.3 * torch.randn(v, h, generator=gen)).to(dtype).requires_grad_()
    b = (0.1 * torch.randn(v, generator=gen)).to(dtype).requires_grad_() if bias else None
    return hidden, weight, b, torch.randint(0, v, (n,), generator=gen)


def _grads(loss, *tensors):
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("smoothing", [0.0, 0.1], ids=["plain", "label-smoothing"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_fp32_loss_and_gradients_equal_cross_entropy_on_full_logits(smoothing, bias):
    hidden, weight, b, targets = _problem(bias=bias)
    total, entropy, correct = ChunkedCrossEntropy.apply(hidden, weight, b, targets, smoothing, 64)  # 5 chunks
    logits = hidden @ weight.t() + (b if bias else 0)
    reference = F.cross_entropy(logits, targets, reduction="sum", label_smoothing=smoothing)
    assert _rel(total, reference) <= 1e-6
    mine_all, theirs_all = _grads(total / 300, hidden, weight, b), _grads(reference / 300, hidden, weight, b)
    for mine, theirs in zip(mine_all, theirs_all, strict=True):
        assert _rel(mine, theirs) <= 1e-6
    probs = logits.detach().softmax(-1)
    assert _rel(entropy, -(probs * probs.log()).sum()) <= 1e-5
    assert int(correct) == int((logits.argmax(-1) == targets).sum())


def test_bf16_stays_within_bf16_rounding_of_the_plain_path():
    """In bf16 both paths round the logits and their gradient to bf16; the chunked one is no further from the
    fp32 result than the plain bf16 computation, up to a bf16 rounding step."""
    hidden, weight, _, targets = _problem(dtype=torch.bfloat16)
    exact = F.cross_entropy(hidden.float() @ weight.float().t(), targets, reduction="sum")
    exact_grads = _grads(exact, hidden, weight)
    total = ChunkedCrossEntropy.apply(hidden, weight, None, targets, 0.0, 64)[0]
    plain = F.cross_entropy((hidden @ weight.t()).float(), targets, reduction="sum")
    step = 2**-8  # bf16's relative rounding
    assert _rel(total, exact) <= _rel(plain, exact) + step
    mine_all, plain_all = _grads(total, hidden, weight), _grads(plain, hidden, weight)
    for mine, theirs, truth in zip(mine_all, plain_all, exact_grads, strict=True):
        assert mine.dtype == torch.bfloat16
        assert _rel(mine, truth) <= _rel(theirs, truth) + step


def test_chunks_hold_a_bounded_number_of_bytes_whatever_the_batch():
    assert chunk_tokens(49_152) == 168 and chunk_tokens(128_256) == 64 and chunk_tokens(10**9) == 8
    assert chunk_tokens(128_256) * 128_256 * 4 <= CHUNK_BYTES
    short, long = (extra_peak_bytes(n, 128_256, 256, 2, False) for n in (4096, 65_536))
    assert long - short == 2 * (65_536 - 4096) * 256 * 2  # only the per-token hidden states grow
    full = full_extra_peak_bytes(4096, 128_256, 2)
    assert short < 0.1 * 4096 * 128_256 * 4 < full  # under a tenth of the fp32 logits; the plain path: 4x them
    assert extra_peak_bytes(4096, 128_256, 256, 2, True) - short == 128_256 * 256 * 4  # the head's fp32 gradient


# --- from a model ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)


def _batch(seed=0):
    """Two padded rows, answers-only labels (-100 before each answer and on padding)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 320, (2, 24), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 17:] = 0
    labels = ids.clone()
    labels[0, :9], labels[1, :5], labels[1, 17:] = -100, -100, -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _packed_row(seed=1):
    """One padding-free row holding three samples, their positions counted from 0, the first token of each
    unlabelled (what the row-packing collator gives)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = (9, 6, 11)
    ids = torch.randint(3, 320, (1, sum(lengths)), generator=gen)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    labels = ids.clone()
    labels[positions == 0] = -100
    labels[0, 3:6] = -100  # a prompt of the first sample
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def _model_loss_and_grads(model, inputs, method, num_items=None):
    model.zero_grad(set_to_none=True)
    if method == "plain":
        extra = {"num_items_in_batch": num_items} if num_items is not None else {}
        loss = model(**inputs, use_cache=False, **extra).loss
    else:
        loss = causal_lm_loss(model, lm_loss.language_model(model), inputs, method, 0.0, num_items).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("make", [_batch, _packed_row], ids=["padded-answers-only", "padding-free-row"])
@pytest.mark.parametrize("num_items", [None, 57], ids=["mean", "num_items_in_batch"])
def test_model_loss_and_every_gradient_equal_the_models_own(tiny, make, num_items):
    """The tiny Llama ties its input and output embeddings: the shared weight's gradient has both parts."""
    assert tiny.get_output_embeddings().weight is tiny.get_input_embeddings().weight
    items = torch.tensor(num_items) if num_items is not None else None
    plain, plain_grads = _model_loss_and_grads(tiny, make(), "plain", items)
    chunked, chunked_grads = _model_loss_and_grads(tiny, make(), "chunked", items)
    assert _rel(chunked, plain) <= 1e-6
    assert chunked_grads.keys() == plain_grads.keys() and "model.embed_tokens.weight" in chunked_grads
    for name, grad in chunked_grads.items():
        assert _rel(grad, plain_grads[name]) <= 1e-5, name


def test_lora_keeps_no_head_gradient(tiny, monkeypatch):
    from peft import LoraConfig, get_peft_model

    made = []
    original = lm_loss._Gradients.__init__

    def recording(self, hidden, weight, bias, wants):
        original(self, hidden, weight, bias, wants)
        made.append(self.weight)

    monkeypatch.setattr(lm_loss._Gradients, "__init__", recording)
    model = get_peft_model(
        __import__("copy").deepcopy(tiny), LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0)
    )
    model.train()
    head = model.get_base_model().get_output_embeddings()
    assert not head.weight.requires_grad
    plain, plain_grads = _model_loss_and_grads(model, _batch(), "plain")
    chunked, chunked_grads = _model_loss_and_grads(model, _batch(), "chunked")
    assert made == [None] and head.weight.grad is None  # no head-sized buffer, no head gradient
    assert _rel(chunked, plain) <= 1e-6 and chunked_grads.keys() == plain_grads.keys()
    assert all(_rel(grad, plain_grads[name]) <= 1e-5 for name, grad in chunked_grads.items())


# --- models that keep the plain path ---------------------------------------------------------------------------


def _tiny(config_cls, **extra):
    from transformers import AutoModelForCausalLM

    config = config_cls(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        **extra,
    )
    return AutoModelForCausalLM.from_config(config)


class _ScaledHead(torch.nn.Linear):
    def forward(self, x):
        return 2 * super().forward(x)


def test_models_that_post_process_their_logits_keep_the_plain_path(tiny):
    import copy

    from transformers import CohereConfig, Gemma2Config

    assert head_problem(tiny) is None
    softcapped = head_problem(_tiny(Gemma2Config, final_logit_softcapping=30.0))
    assert "final_logit_softcapping: 30.0" in softcapped
    assert "logit_scale: 0.0625" in head_problem(_tiny(CohereConfig, logit_scale=0.0625))
    other = copy.deepcopy(tiny)
    other.lm_head = _ScaledHead(64, 320, bias=False)
    assert "_ScaledHead, not a plain Linear" in head_problem(other)
    hidden = copy.deepcopy(tiny)  # a forward that scales the logits where no config field says so
    hidden.register_forward_hook(lambda module, args, output: type(output)(logits=output.logits * 2))
    assert "not its output head applied" in head_problem(hidden)


def test_the_builder_check_refines_the_plan_with_a_note(tmp_path, tiny, capsys):
    from transformers import Gemma2Config

    from autotrain.trainers.llm.base import loss_for_model
    from autotrain.training.plan import resolve_plan

    cfg = _sft_config(tmp_path)
    plan = resolve_plan(cfg, device="cpu")
    assert plan.cross_entropy == "chunked" and plan.record()["cross_entropy"] == "chunked"
    assert loss_for_model(plan, tiny, cfg) is plan
    refined = loss_for_model(plan, _tiny(Gemma2Config, final_logit_softcapping=30.0), cfg)
    assert refined.cross_entropy == "full"
    assert refined.record()["refined_after_loading"][0]["field"] == "cross_entropy"
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "final_logit_softcapping" in note and "cross_entropy: full" in note


def test_lora_on_the_output_head_keeps_the_plain_path(tmp_path, tiny, capsys):
    from peft import LoraConfig, get_peft_model

    from autotrain.trainers.llm.base import loss_for_model
    from autotrain.training.lm_loss import adapts_head
    from autotrain.training.plan import resolve_plan

    assert not adapts_head(tiny, "all-linear") and not adapts_head(tiny, ["q_proj", "v_proj"])
    assert adapts_head(tiny, ["q_proj", "lm_head"])
    cfg = _sft_config(tmp_path).model_copy(update={"peft": {"enabled": True, "target_modules": ["q_proj", "lm_head"]}})
    cfg = type(cfg).model_validate(cfg.model_dump())
    plan = loss_for_model(resolve_plan(cfg, device="cpu"), tiny, cfg)
    assert plan.cross_entropy == "full" and "adapts its output head" in capsys.readouterr().err
    adapted = get_peft_model(__import__("copy").deepcopy(tiny), LoraConfig(r=2, target_modules=["lm_head"]))
    with pytest.raises(ValueError, match="needs a plain Linear output head"):  # never the base weight's loss
        causal_lm_loss(adapted, adapted.get_base_model(), _batch(), "chunked")


def _sft_config(tmp_path, **training):
    from autotrain.config.load import load_data
    from autotrain.config.yaml_source import Locator

    raw = {
        "task": "llm",
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(Path(TINY).parent / "data" / "chat.jsonl"), "chat_template": "chatml"},
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 64, "mixed_precision": "no", **training},
    }
    return load_data(raw, Locator("config.yml"), environ={}).config


# --- the kernels of other packages, their imports stood in for --------------------------------------------------


def _stand_in(monkeypatch, module: str, name: str, calls: list):
    def kernel(hidden, weight, targets, bias=None, label_smoothing=0.0, reduction="mean"):
        calls.append((hidden.shape, weight.shape, targets.shape, reduction, label_smoothing))
        logits = hidden @ weight.t() + (bias if bias is not None else 0)
        return F.cross_entropy(logits.float(), targets, reduction=reduction, label_smoothing=label_smoothing)

    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    setattr(sys.modules[module], name, kernel)


@pytest.mark.parametrize(
    "method, module, name",
    [
        ("liger", "liger_kernel.transformers.functional", "liger_fused_linear_cross_entropy"),
        ("cut_cross_entropy", "cut_cross_entropy", "linear_cross_entropy"),
    ],
)
def test_kernel_losses_get_the_labelled_hidden_states_and_the_head(monkeypatch, method, module, name):
    calls = []
    _stand_in(monkeypatch, module, name, calls)
    hidden, weight, _, targets = _problem(n=40, v=50)
    total, entropy, correct = summed_cross_entropy(hidden, weight, None, targets, method)
    assert calls == [((40, 32), (50, 32), (40,), "sum", 0.0)] and entropy is None and correct is None
    assert _rel(total, ChunkedCrossEntropy.apply(hidden, weight, None, targets, 0.0, 16)[0]) <= 1e-6
