"""The plan decides once: the load dtype is in it (and in run.json), a builder changes it only through
`RunPlan.refine` (recorded), and inference loads a run's model in the dtype its plan recorded."""

from __future__ import annotations

import json

import pytest
import torch

from autotrain.config.llm import LLMConfig
from autotrain.errors import UserInputError
from autotrain.inference.load import _llm_dtype, read_plan
from autotrain.training.plan import load_dtype, resolve_plan
from autotrain.training.precision import Precision

BASE = {"task": "llm", "base_model": "m", "project_name": "p", "data": {"path": "d"}}


def _cfg(lora: bool) -> LLMConfig:
    return LLMConfig.model_validate({**BASE, "peft": {"enabled": lora}})


@pytest.mark.parametrize(
    ("lora", "mode", "device", "dtype"),
    [
        (True, "bf16", "cuda", "bfloat16"),  # LoRA: the frozen base in the compute dtype
        (True, "fp16", "cuda", "float16"),
        (True, "bf16", "cpu", "float32"),  # CPU bf16 runs fp32 weights under autocast
        (False, "bf16", "cuda", "bfloat16"),
        (False, "fp16", "cuda", "float32"),  # fp16 AMP needs fp32 master weights
        (False, "no", "cuda", "float32"),
    ],
)
def test_the_plan_decides_the_load_dtype(lora, mode, device, dtype):
    assert load_dtype(_cfg(lora), Precision(mode, device)) == dtype


def test_the_plan_records_its_load_dtype_and_its_refinements():
    plan = resolve_plan(_cfg(True), device="cpu")
    assert plan.record()["load_dtype"] == "float32" and plan.record()["refined_after_loading"] == []
    refined = plan.refine("a check said so", padding_free="")
    assert refined.padding_free == "" and plan.padding_free == "rows"  # a new plan; the old one is unchanged
    assert refined.record()["refined_after_loading"] == [
        {"field": "padding_free", "planned": "rows", "used": "", "why": "a check said so"}
    ]


def _recorded(tmp_path, plan_record) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"status": "completed", "plan": plan_record}))


def test_inference_loads_in_the_recorded_dtype(tmp_path):
    record = resolve_plan(_cfg(True), device="cpu").record()
    for recorded, loaded in (("bfloat16", torch.bfloat16), ("float16", torch.float32), ("float32", torch.float32)):
        _recorded(tmp_path, {**record, "load_dtype": recorded})
        # as trained, not decided again; float16 is what a CPU cannot run fast
        assert _llm_dtype(read_plan(tmp_path), "cpu") == loaded


@pytest.mark.parametrize(
    ("lora", "training"),
    [
        (True, {}),
        (False, {"optimizer": "came_8bit+fused_adam", "optimizer_args": {"adam": {"betas": [0.8, 0.9]}}}),
        (False, {"optimizer": "fused_adam", "max_steps": 7, "mixed_precision": "bf16"}),
        (False, {"optimizer": "adafactor"}),
    ],
)
def test_a_recorded_plan_reads_back_as_the_plan(lora, training):
    """run.json's plan, read back, is a RunPlan that records the same (JSON holds a tuple as a list) and
    holds what was decided, typed."""
    from autotrain.optimizers.table import OPTIMIZERS
    from autotrain.training.plan_record import plan_from_record

    cfg = LLMConfig.model_validate({**BASE, "peft": {"enabled": lora}, "training_args": training})
    plan = resolve_plan(cfg, device="cpu").refine("a check said so", padding_free="")
    record = json.loads(json.dumps(plan.record()))
    read = plan_from_record(record)
    assert read.record() == record
    assert (read.precision, read.load_dtype, read.world_size, read.dtypes) == (
        plan.precision,
        plan.load_dtype,
        plan.world_size,
        plan.dtypes,
    )
    assert read.refined == plan.refined and read.refined[0][2:] == ("", "a check said so")
    assert read.optimizer.name == plan.optimizer.name
    spec = OPTIMIZERS[plan.optimizer.name]
    assert (read.optimizer.cls is None) is (not spec.bundled)
    assert read.training_args == {
        k: v for k, v in json.loads(json.dumps(plan.training_args)).items() if k != "output_dir"
    }


def test_a_record_missing_fields_is_an_error_naming_them(tmp_path):
    """An old run's record without what the plan now holds is read as nothing invented: one error naming
    every missing field, and inference stops with it (exit 2), naming the run."""
    from autotrain.training.plan_record import RecordError, plan_from_record

    record = resolve_plan(_cfg(True), device="cpu").record()
    old = {k: v for k, v in record.items() if k not in ("load_dtype", "dtypes")}
    with pytest.raises(RecordError, match=r"^the plan has no `load_dtype`, no `dtypes`"):
        plan_from_record(old)
    with pytest.raises(RecordError, match=r"`mixed_precision.resolved` is 7, not a string"):
        plan_from_record({**record, "mixed_precision": {"asked": "auto", "resolved": 7}})
    _recorded(tmp_path, old)
    with pytest.raises(UserInputError, match=r"run.json`: the plan has no `load_dtype`.*older autotrain"):
        read_plan(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(UserInputError, match=r"run.json`: not JSON"):
        read_plan(tmp_path)
    (tmp_path / "run.json").unlink()
    with pytest.raises(UserInputError, match=r"no run.json"):
        read_plan(tmp_path)


@pytest.mark.parametrize(
    ("lora", "optimizer", "args", "expected"),
    [
        (False, "came_8bit", {}, ("bfloat16", "8-bit moments, float32 statistics", "float32")),
        (False, "fused_adam", {}, ("bfloat16", "float32", "float32")),
        (
            False,
            "came_8bit+fused_adam",
            {"adam": {"master_weights": False}},
            ("bfloat16", "8-bit moments, float32 statistics", None),
        ),
        (False, "adamw_torch", {}, ("bfloat16", "bfloat16", None)),  # torch keeps its state like the weights
        (True, "came", {}, ("float32", "float32", None)),  # LoRA's adapter weights are fp32
    ],
)
def test_the_plan_records_the_dtypes_of_weights_gradients_and_state(monkeypatch, lora, optimizer, args, expected):
    """bf16 on a GPU: a full fine-tune's weights and gradients are bf16; the bundled optimizers keep fp32
    (or 8-bit) state and fp32 master weights (unless told not to)."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)  # a GPU of bf16
    training = {"mixed_precision": "bf16", "optimizer": optimizer, "optimizer_args": args}
    cfg = LLMConfig.model_validate({**BASE, "peft": {"enabled": lora}, "training_args": training})
    dtypes = resolve_plan(cfg, device="cuda").record()["dtypes"]
    weights, state, master = expected
    assert dtypes == {
        "weights": weights,
        "gradients": weights,
        "optimizer_state": state,
        **({"master_weights": master} if master else {}),
    }


def test_a_trainer_without_the_optimizer_argument_builds_the_planned_optimizer(tmp_path):
    """TRL's DPO, KTO, GRPO and ORPO trainers take no `optimizer_cls_and_kwargs`: the planned optimizer is
    what the Trainer's own `create_optimizer` builds (its decay / no-decay groups kept), through the public
    hook it asks, and nothing is set on a built trainer."""
    import inspect

    from transformers import Trainer, TrainingArguments

    from autotrain.optimizers import FusedAdam
    from autotrain.trainers.common import make_trainer

    class NoOptimizerArgument(Trainer):  # as TRL's: no `optimizer_cls_and_kwargs` among its arguments
        def __init__(self, model, args):
            super().__init__(model=model, args=args)

    assert "optimizer_cls_and_kwargs" not in inspect.signature(NoOptimizerArgument.__init__).parameters
    training = {"optimizer": "fused_adam", "weight_decay": 0.1}
    cfg = LLMConfig.model_validate({**BASE, "peft": {"enabled": False}, "training_args": training})
    plan = resolve_plan(cfg, device="cpu")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    args = TrainingArguments(output_dir=str(tmp_path), weight_decay=0.1, report_to=[], use_cpu=True)
    trainer, returned = make_trainer(NoOptimizerArgument, plan, model=model, args=args)
    assert returned is plan and isinstance(trainer, NoOptimizerArgument)
    assert trainer.optimizer_cls_and_kwargs is None
    optimizer = trainer.create_optimizer()
    assert type(optimizer) is FusedAdam and optimizer.defaults["lr"] == plan.optimizer.kwargs["lr"]
    decays = sorted((g["weight_decay"], len(g["params"])) for g in optimizer.param_groups)
    assert decays == [(0.0, 3), (0.1, 1)]  # the Linear's weight decays; its bias and the norm's do not


@pytest.mark.parametrize("args_class", ["transformers:TrainingArguments", "trl:SFTConfig", "trl:DPOConfig"])
def test_the_warm_up_spans_the_asked_fraction_of_the_steps(tmp_path, args_class):
    """`warmup_ratio: 0.25` of 20 steps: the rate climbs linearly over the first 5 steps to `lr`, then the
    linear schedule takes it down to 0 at step 20 (transformers 5 reads `warmup_steps` below 1 as a ratio)."""
    import importlib

    from transformers import Trainer

    module, name = args_class.split(":")
    training = {"lr": 1e-3, "warmup_ratio": 0.25, "max_steps": 20, "scheduler": "linear"}
    plan = resolve_plan(LLMConfig.model_validate({**BASE, "training_args": training}), device="cpu")
    args = getattr(importlib.import_module(module), name)(**{**plan.training_args, "output_dir": str(tmp_path)})
    trainer = Trainer(model=torch.nn.Linear(2, 1), args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=20)
    rates = []
    for _ in range(21):
        rates.append(trainer.lr_scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert rates[:6] == pytest.approx([1e-3 * step / 5 for step in range(6)])
    assert rates[5:] == pytest.approx([1e-3 * (20 - step) / 15 for step in range(5, 21)])


@pytest.mark.parametrize(
    "peft",
    [
        {"enabled": True, "use_dora": True, "use_rslora": True, "loraplus_lr_ratio": 8},
        {"enabled": True, "init": "pissa", "pissa_niter": 4},
        {"enabled": True, "init": "olora"},
    ],
)
def test_a_recorded_adapter_reads_back_as_planned(peft):
    """The LoRA variant a run trained (method, scale rule, init, LoRA+ ratio) reads back from its record as
    the plan had it."""
    from autotrain.training.plan_record import plan_from_record

    cfg = LLMConfig.model_validate({**BASE, "peft": peft})
    plan = resolve_plan(cfg, device="cpu")
    read = plan_from_record(json.loads(json.dumps(plan.record())))
    assert read.adapter == plan.adapter and read.adapter is not None


def test_a_record_from_before_the_adapter_and_the_batch_were_recorded_reads_back():
    """The documented migrations (plan_record.ADDED_LATER): a record written before the plan held its adapter
    reads back without one, and its batch from the TrainingArguments it recorded; a record whose adapter is
    malformed is an error naming the field."""
    from autotrain.training.plan_record import RecordError, plan_from_record

    cfg = LLMConfig.model_validate({**BASE, "peft": {"enabled": True}, "training_args": {"batch_size": 3}})
    record = json.loads(json.dumps(resolve_plan(cfg, device="cpu").record()))
    older = {
        key: value
        for key, value in record.items()
        if key not in ("adapter", "batch_size", "gradient_accumulation", "cross_entropy")
    }
    assert plan_from_record(record).cross_entropy == "chunked"
    read = plan_from_record(older)
    assert read.adapter is None and read.cross_entropy == ""
    assert (read.batch_size, read.gradient_accumulation) == (3, 1)
    record["adapter"]["init_lora_weights"] = 3
    with pytest.raises(RecordError, match="adapter.init_lora_weights"):
        plan_from_record(record)
