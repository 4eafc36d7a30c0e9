"""Optimizer names: argument schemas, the registry, and the hand-off to the transformers Trainer."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest
import torch
from pydantic import ValidationError

from autotrain.config.base import OptimizerName
from autotrain.optimizers import BUNDLED, CAME8BitFusedAdam, hf_optimizer_settings, optimizer_cls_and_kwargs
from autotrain.optimizers.table import OPTIMIZERS

OPTIMIZER_ARGS = {name: spec.args for name, spec in OPTIMIZERS.items()}

# Small enough that the tiny model's matrices take the 8-bit / CAME paths.
TINY_ARGS = {
    "came": {},
    "came_8bit": {"block_size": 256, "min_8bit_size": 1024},
    "fused_adam": {"master_weights": True},
    "came_8bit+fused_adam": {"came": {"block_size": 256, "min_8bit_size": 1024}, "min_factored_size": 1024},
}


def test_every_name_has_a_schema():
    assert set(OPTIMIZERS) == set(typing.get_args(OptimizerName))  # the config's names are the table's
    assert set(BUNDLED) == set(TINY_ARGS)
    for name, model in OPTIMIZER_ARGS.items():
        model()  # the defaults are valid
        assert all(f.description for f in model.model_fields.values()), name


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("came", {"betas": [0.9, 0.999]}),  # wrong length
        ("came_8bit", {"betas": [0.9, 0.999, 1.0]}),  # out of [0, 1)
        ("fused_adam", {"betas": [0.9, 0.99, 0.999]}),
        ("came", {"clip_treshold": 1.0}),  # typo
        ("fused_adam", {"lr": 1e-3}),  # comes from training_args
        ("adamw_torch", {"weight_decay": 0.1}),
        ("came_8bit+fused_adam", {"adam": {"bogus": 1}}),
        ("sgd", {"nesterov": True}),  # needs momentum
        ("came_8bit", {"block_size": 0}),
        ("adamw_torch", {"amsgrad": True}),  # transformers would drop it
        ("adafactor", {"relative_step": True}),
    ],
)
def test_bad_optimizer_args_are_rejected(name, args):
    with pytest.raises(ValidationError):
        OPTIMIZER_ARGS[name].model_validate(args)


def test_fused_adam_amsgrad_message():
    with pytest.raises(ValidationError, match="amsgrad is not supported by FusedAdam"):
        OPTIMIZER_ARGS["fused_adam"].model_validate({"amsgrad": True})


def test_light_imports():
    code = (
        "import sys, autotrain.optimizers.table, autotrain.config.load; assert 'torch' not in sys.modules; "
        "import autotrain.optimizers.registry; assert 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_optimizer_cls_and_kwargs():
    cls, kwargs = optimizer_cls_and_kwargs("came_8bit+fused_adam", {"came": {"betas": [0.8, 0.9, 0.99]}})
    assert cls is CAME8BitFusedAdam
    assert kwargs["came"]["betas"] == (0.8, 0.9, 0.99)
    assert "lr" not in kwargs and "weight_decay" not in kwargs
    with pytest.raises(ValueError, match="not a bundled optimizer"):
        optimizer_cls_and_kwargs("adamw_torch", {})


@pytest.mark.parametrize("name", [n for n, spec in OPTIMIZERS.items() if spec.parts])
def test_a_combination_declares_its_parts_as_its_arguments_and_class_take_them(name):
    """The table says which argument of a combined optimizer holds which part's arguments: they are its
    argument model's fields, of the part's own argument model, and its class takes them."""
    import inspect

    spec = OPTIMIZERS[name]
    for argument, part in spec.parts:
        assert OPTIMIZERS[part].bundled
        assert spec.args.model_fields[argument].annotation is OPTIMIZERS[part].args
        assert argument in inspect.signature(spec.load_class().__init__).parameters
    _, kwargs = optimizer_cls_and_kwargs(name, {})
    assert spec.part_kwargs(kwargs)[0] == (spec.parts[0][1], kwargs[spec.parts[0][0]])


def test_hf_optimizer_settings():
    from transformers import TrainingArguments

    assert hf_optimizer_settings("adamw_8bit", {})["optim"] == "adamw_bnb_8bit"
    with pytest.raises(ValueError, match="bundled"):
        hf_optimizer_settings("came", {})
    settings = hf_optimizer_settings("adamw_torch_fused", {"betas": [0.8, 0.95], "eps": 1e-6})
    assert settings == dict(optim="adamw_torch_fused", adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-6)
    sgd = hf_optimizer_settings("sgd", {"momentum": 0.9, "nesterov": True})
    assert sgd == {"optim": "sgd", "optim_args": "momentum=0.9,nesterov=True,dampening=0.0"}
    assert hf_optimizer_settings("adafactor", {}) == {"optim": "adafactor"}
    TrainingArguments(output_dir="unused", report_to=[], **sgd)
    with pytest.raises(ValidationError):  # transformers would silently drop it
        hf_optimizer_settings("adamw_torch", {"amsgrad": True})


# Names older transformers releases still know, which the table leaves out: adamw_apex_fused (NVIDIA apex,
# which transformers dropped in 5.8) is refused as an unknown optimizer; `fused_adam` is the bundled equivalent.
DROPPED = {"adamw_apex_fused"}


def test_the_table_knows_every_optimizer_name_of_the_installed_transformers():
    """The table writes transformers' names out (it must import neither torch nor transformers); this catches
    a name transformers adds or drops."""
    from transformers.training_args import OptimizerNames

    names = {o.value for o in OptimizerNames}
    assert names - set(OPTIMIZERS) - DROPPED == set(), "add these to autotrain/optimizers/table.py"
    targets = {spec.target for spec in OPTIMIZERS.values() if not spec.bundled}
    assert targets - names == set(), "transformers no longer knows these"


def test_every_bitsandbytes_optimizer_needs_cuda_and_the_package():
    for name, spec in OPTIMIZERS.items():
        if "paged" in name or "bnb" in name or name.startswith(("lion_", "ademamix", "adamw_8bit")):
            assert spec.package == "bitsandbytes" and spec.cuda_only, name


def test_settings_of_the_optimizers_transformers_builds_from_optim_args():
    from transformers import TrainingArguments

    grok = hf_optimizer_settings("grokadamw", {"alpha_init": 0.9, "gamma": 0.2})
    assert grok == {"optim": "grokadamw", "optim_args": "alpha_init=0.9,gamma=0.2"}
    assert hf_optimizer_settings("adagrad", {}) == {"optim": "adagrad"}
    galore = hf_optimizer_settings("galore_adamw", {"rank": 8, "target_modules": ["q_proj", "v_proj"]})
    assert galore == {"optim": "galore_adamw", "optim_target_modules": ["q_proj", "v_proj"], "optim_args": "rank=8"}
    lion = hf_optimizer_settings("paged_lion_8bit", {"betas": [0.95, 0.98]})
    assert lion == {"optim": "paged_lion_8bit", "adam_beta1": 0.95, "adam_beta2": 0.98}
    TrainingArguments(output_dir="unused", report_to=[], **grok)
    TrainingArguments(output_dir="unused", report_to=[], **galore)


@pytest.mark.parametrize("args", [{"a": [1, 2]}, {"a": "x,y"}, {"a": float("nan")}, {"a": {"b": 1}}])
def test_optim_args_must_fit_transformers_string(args):
    with pytest.raises(ValidationError):
        OPTIMIZER_ARGS["grokadamw"].model_validate(args)


@pytest.mark.parametrize("name", ["adagrad", "rmsprop"])
def test_a_torch_optimizer_transformers_builds_trains(name, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))  # fmt: skip
    settings = hf_optimizer_settings(name, {"momentum": 0.5} if name == "rmsprop" else {})
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, learning_rate=1e-2, **settings)
    optimizer = Trainer(model=model, args=args).create_optimizer()
    assert type(optimizer).__name__.lower() == name
    if name == "rmsprop":
        assert optimizer.defaults["momentum"] == 0.5


@pytest.fixture(scope="module")
def tiny_trainer_parts(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    args = TrainingArguments(
        output_dir=str(tmp_path_factory.mktemp("trainer")), report_to=[], use_cpu=True, weight_decay=0.1
    )
    return LlamaForCausalLM, config, args


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_optimizer_through_the_trainer(name, tiny_trainer_parts):
    from transformers import Trainer

    model_cls, config, args = tiny_trainer_parts
    torch.manual_seed(0)
    model = model_cls(config)
    cls, kwargs = optimizer_cls_and_kwargs(name, TINY_ARGS[name])
    trainer = Trainer(model=model, args=args, optimizer_cls_and_kwargs=(cls, {**kwargs, "lr": 1e-3}))
    optimizer = trainer.create_optimizer()
    assert isinstance(optimizer, cls)
    assert {g["weight_decay"] for g in optimizer.param_groups} == {0.0, 0.1}  # Trainer's grouping kept

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    input_ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        loss = model(input_ids=input_ids, labels=input_ids).loss
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters()), name
    if name in ("came_8bit", "came_8bit+fused_adam"):
        assert any("exp_avg_codes" in s for s in optimizer.state.values())
