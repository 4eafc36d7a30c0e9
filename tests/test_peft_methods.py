"""The LoRA variants of `peft:`: DoRA, rsLoRA, the Gaussian / PiSSA / OLoRA starts and LoRA+. Each field reaches
peft's LoraConfig, each bad combination is one located error naming both fields, `all-linear` adapts every Linear
layer but the output one, LoRA+ gives every optimizer of the table the B matrices at lr x ratio, each method trains
the tiny Llama (every trainable parameter moves), and a PiSSA / OLoRA run saves a plain LoRA adapter that gives on
the unchanged base model what the trained model gives. The SmolLM2 runs of each method are in
tests/test_peft_methods_real.py."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from autotrain.config.load import load_data
from autotrain.config.yaml_source import Locator
from autotrain.optimizers.table import OPTIMIZERS
from autotrain.training.plan import resolve_plan

ASSETS = Path(__file__).parent / "assets"
TINY = str(ASSETS / "tiny-llama")
TEXT = {"path": str(ASSETS / "data" / "text.jsonl"), "column_mapping": {"text": "text"}}
PREFS = {
    "path": str(ASSETS / "data" / "preferences.jsonl"),
    "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"},
}


def raw_config(tmp_path: Path, peft: dict | None = None, trainer: str = "sft", **training) -> dict:
    return {
        "task": "llm",
        "trainer": trainer,
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": PREFS if trainer in ("dpo", "orpo", "reward") else TEXT,
        "peft": {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0, **(peft or {})},
        "training_args": {"max_steps": 3, "batch_size": 4, "lr": 1e-2, "max_length": 64, "logging_steps": 1,
                          "mixed_precision": "no", "save_steps": 1000, **training},
    }  # fmt: skip


def config(tmp_path: Path, peft: dict | None = None, trainer: str = "sft", **training):
    return load_data(raw_config(tmp_path, peft, trainer, **training), Locator("config.yml"), environ={}).config


# --- each field reaches peft ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "peft, expected",
    [
        ({}, {"use_dora": False, "use_rslora": False, "init_lora_weights": True, "target_modules": "all-linear"}),
        ({"use_dora": True}, {"use_dora": True}),
        ({"use_rslora": True}, {"use_rslora": True}),
        ({"init": "gaussian"}, {"init_lora_weights": "gaussian"}),
        ({"init": "pissa"}, {"init_lora_weights": "pissa"}),
        ({"init": "pissa", "pissa_niter": 4}, {"init_lora_weights": "pissa_niter_4"}),
        ({"init": "olora"}, {"init_lora_weights": "olora"}),
        ({"target_modules": ["q_proj", "v_proj"]}, {"target_modules": {"q_proj", "v_proj"}}),
    ],
    ids=["defaults", "dora", "rslora", "gaussian", "pissa", "pissa-fast", "olora", "listed-modules"],
)
def test_each_field_reaches_peft(tmp_path, peft, expected):
    from autotrain.trainers.llm.model import build_lora_config

    lora = build_lora_config(config(tmp_path, peft))
    assert {key: getattr(lora, key) for key in expected} == expected


@pytest.mark.parametrize("task", ["seq2seq", "vlm"])
def test_the_other_lora_tasks_pass_the_same_fields(task):
    from autotrain.config.tasks import schema_of
    from autotrain.trainers.llm.model import build_lora_config

    peft = {"use_rslora": True, "init": "pissa", "pissa_niter": 2, "loraplus_lr_ratio": 8}
    raw = {"task": task, "base_model": "m", "project_name": "runs/x", "data": {"path": "rows"}, "peft": peft}
    cfg = schema_of(task).model_validate(raw)
    lora = build_lora_config(cfg, "SEQ_2_SEQ_LM")
    assert (lora.use_rslora, lora.init_lora_weights, lora.target_modules) == (True, "pissa_niter_2", "all-linear")
    assert resolve_plan(cfg, device="cpu").adapter.loraplus_lr_ratio == 8


def test_the_plan_records_the_method(tmp_path):
    peft = {"use_dora": True, "use_rslora": True, "loraplus_lr_ratio": 16}
    record = resolve_plan(config(tmp_path, peft), device="cpu").record()["adapter"]
    assert record == {
        "method": "DoRA", "r": 4, "alpha": 8, "scale": 4.0, "scale_rule": "alpha / sqrt(r) (rsLoRA)",
        "init_lora_weights": True, "loraplus_lr_ratio": 16.0, "saved_as": "DoRA adapter of rank 4",
    }  # fmt: skip
    pissa = resolve_plan(config(tmp_path, {"init": "pissa"}), device="cpu").adapter
    assert pissa.converts and "plain LoRA adapter of rank 8" in pissa.summary()
    full = load_data({**raw_config(tmp_path), "peft": None}, Locator("config.yml"), environ={}).config
    assert resolve_plan(full, device="cpu").record()["adapter"] is None


# --- bad combinations: one located line each, naming both fields ---------------------------------------------


@pytest.mark.parametrize(
    "peft, trainer, training, where, said",
    [
        ({"init": "pissa", "use_dora": True}, "sft", {}, "peft.init", "`peft.use_dora: true`"),
        ({"init": "olora", "quantization": "int4"}, "sft", {}, "peft.init", "`peft.quantization: int4`"),
        ({"init": "gaussian", "pissa_niter": 4}, "sft", {}, "peft.pissa_niter", "`peft.init: pissa`"),
        ({"init": "pissa"}, "dpo", {}, "peft.init", "`trainer: dpo`"),
        ({"init": "olora"}, "kto", {}, "peft.init", "`trainer: kto`"),
        ({"init": "pissa"}, "grpo", {"beta": 0.1}, "peft.init", "`training_args.beta` above 0"),
        ({"loraplus_lr_ratio": 16}, "sft", {"optimizer": "galore_adamw"}, "peft.loraplus_lr_ratio",
         "`training_args.optimizer: galore_adamw`"),
        ({"loraplus_lr_ratio": 16}, "sft", {"optimizer": "lomo"}, "peft.loraplus_lr_ratio",
         "`training_args.optimizer: lomo`"),
        ({"enabled": False, "use_dora": True}, "sft", {}, "peft.use_dora", "`peft.enabled: true`"),
        ({"enabled": False, "init": "olora"}, "sft", {}, "peft.init", "`peft.enabled: true`"),
        ({"enabled": False, "loraplus_lr_ratio": 2}, "sft", {}, "peft.loraplus_lr_ratio", "`peft.enabled: true`"),
    ],
    ids=["pissa-dora", "olora-int4", "niter-without-pissa", "pissa-dpo", "olora-kto", "pissa-grpo-kl",
         "loraplus-galore", "loraplus-lomo", "dora-off", "olora-off", "loraplus-off"],
)  # fmt: skip
def test_bad_combinations_are_one_located_error(cli, tmp_path, peft, trainer, training, where, said):
    raw = raw_config(tmp_path, peft, trainer, **training)
    if trainer in ("kto", "grpo"):
        raw["data"] = {"path": str(ASSETS / "data" / "text.jsonl")}
    raw["peft"].pop("dropout")
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = cli("validate", path)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if f": {where}: " in line]
    assert len(lines) == 1 and said in lines[0] and f"`{where}" in lines[0], result.stderr
    assert lines[0].startswith(f"{path}:") and lines[0].split(":")[1].isdigit()  # file:line:col


def test_pissa_and_olora_are_refused_under_sharding(cli, tmp_path):
    raw = raw_config(tmp_path, {"init": "pissa"})
    raw["distributed"] = {"num_processes": 2, "strategy": "deepspeed"}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(raw))
    result = cli("validate", path)
    assert result.exit_code == 2 and "`distributed.strategy: deepspeed`" in result.stderr, result.output
    assert "peft.init: `peft.init: pissa` cannot run under" in result.stderr


def test_other_tools_names_point_to_the_fields(cli, tmp_path):
    """LLaMA-Factory's `pissa_init` / `pissa_iter`, axolotl's `peft_use_dora`, peft's `init_lora_weights` and a
    flat `loraplus_lr_ratio` are each named with the field they mean here."""
    raw = {key: value for key, value in raw_config(tmp_path).items() if key != "peft"}
    raw.update(pissa_init=True, loraplus_lr_ratio=16, peft={"init_lora_weights": "pissa", "peft_use_dora": True})
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(raw))
    result = cli("validate", path)
    assert result.exit_code == 2
    for said in ("pissa_init: unknown key (did you mean `peft.init`?)",
                 "loraplus_lr_ratio: unknown key (did you mean `peft.loraplus_lr_ratio`?)",
                 "peft.init_lora_weights: unknown key (did you mean `init`?)",
                 "peft.peft_use_dora: unknown key (did you mean `use_dora`?)"):  # fmt: skip
        assert said in result.stderr, result.stderr


# --- all-linear --------------------------------------------------------------------------------------------


def _adapted_and_linear(model) -> tuple[set[str], set[str]]:
    """(the layers peft adapted, every Linear layer of the model as it was) of a peft model, by name."""
    from torch import nn

    def original(name: str) -> str:
        for wrapper in (".base_layer", ".original_module", ".modules_to_save.default"):
            name = name.split(wrapper)[0]
        return name.removeprefix("base_model.model.")

    linear = {original(n) for n, m in model.named_modules() if isinstance(m, nn.Linear) and "lora_" not in n}
    adapted = {original(n) for n, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")}
    return adapted, linear


def _tiny_model(kind: str, tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    if kind == "causal":
        return AutoModelForCausalLM.from_pretrained(TINY), "CAUSAL_LM", "lm_head"
    if kind == "scorer":  # the reward trainer's one-logit head, trained whole (peft's modules_to_save)
        return AutoModelForSequenceClassification.from_pretrained(TINY, num_labels=1), "SEQ_CLS", "score"
    if kind == "seq2seq":
        from text_tasks_assets import tiny_t5
        from transformers import AutoModelForSeq2SeqLM

        return AutoModelForSeq2SeqLM.from_pretrained(tiny_t5(tmp_path / "t5")), "SEQ_2_SEQ_LM", "lm_head"
    from transformers import AutoModelForImageTextToText
    from vision_assets import tiny_idefics3

    return AutoModelForImageTextToText.from_pretrained(tiny_idefics3(tmp_path / "vlm")), "CAUSAL_LM", "lm_head"


@pytest.mark.parametrize("kind", ["causal", "scorer", "seq2seq", "vlm"])
def test_all_linear_adapts_every_linear_layer_but_the_output(tmp_path, kind):
    from peft import get_peft_model

    from autotrain.trainers.llm.model import build_lora_config

    model, task_type, output = _tiny_model(kind, tmp_path)
    lora = build_lora_config(config(tmp_path), task_type)
    assert lora.target_modules == "all-linear"
    adapted, linear = _adapted_and_linear(get_peft_model(model, lora))
    assert linear - adapted == {output} and adapted < linear


# --- LoRA+ with every optimizer of the table --------------------------------------------------------------

RUNNABLE = [
    name
    for name, spec in OPTIMIZERS.items()
    if not name.startswith(("galore_", "apollo_", "lomo", "adalomo"))  # refused with LoRA+ (tested above)
]


def _runs_here(name: str) -> str | None:
    spec = OPTIMIZERS[name]
    if spec.cuda_only and not torch.cuda.is_available():
        return f"{name} needs CUDA"
    if spec.import_name and importlib.util.find_spec(spec.import_name.replace("-", "_")) is None:
        return f"{name} needs `pip install {spec.package}`"
    return None


@pytest.fixture(scope="module")
def dora_model(tmp_path_factory):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from autotrain.trainers.llm.model import build_lora_config

    cfg = config(tmp_path_factory.mktemp("loraplus"), {"use_dora": True})
    return get_peft_model(AutoModelForCausalLM.from_pretrained(TINY), build_lora_config(cfg))


@pytest.mark.parametrize("name", RUNNABLE)
def test_loraplus_gives_every_optimizer_the_b_matrices_at_lr_times_ratio(tmp_path, dora_model, name):
    if _runs_here(name):
        pytest.skip(_runs_here(name))
    from transformers import Trainer, TrainingArguments

    from autotrain.trainers.common import make_trainer

    cfg = config(tmp_path, {"use_dora": True, "loraplus_lr_ratio": 16}, "clm", optimizer=name, weight_decay=0.01)
    plan = resolve_plan(cfg, device="cpu")
    trainer, _ = make_trainer(Trainer, plan, model=dora_model, args=TrainingArguments(**plan.training_args))
    optimizer = trainer.create_optimizer()
    rate = {id(p): (group["lr"], group["weight_decay"]) for group in optimizer.param_groups for p in group["params"]}
    trained = {n: p for n, p in dora_model.named_parameters() if p.requires_grad}
    assert set(rate) == {id(p) for p in trained.values()}
    for n, p in trained.items():
        fast = "lora_B" in n or "lora_magnitude_vector" in n  # DoRA's magnitudes are peft's 1-D "B" group
        assert rate[id(p)] == (pytest.approx(0.16 if fast else 0.01), pytest.approx(0.01)), n
    before = {n: p.detach().clone() for n, p in trained.items()}
    for p in trained.values():
        p.grad = torch.full_like(p, 1e-2)
    optimizer.step()
    assert all(not torch.equal(p, before[n]) for n, p in trained.items())
    with torch.no_grad():  # the shared model back as it was
        for n, p in trained.items():
            p.copy_(before[n])
            p.grad = None


def test_loraplus_says_which_optimizer_cannot_take_its_groups(tmp_path, dora_model):
    from transformers import Trainer, TrainingArguments

    from autotrain.errors import UserInputError
    from autotrain.trainers.common import make_trainer

    plan = resolve_plan(config(tmp_path, {"loraplus_lr_ratio": 4}, "clm"), device="cpu")
    trainer, _ = make_trainer(Trainer, plan, model=dora_model, args=TrainingArguments(**plan.training_args))
    trainer.optimizer_cls_and_kwargs = (lambda model, **kwargs: None, {})  # a factory, as Muon's: not a class
    with pytest.raises(UserInputError, match="makes its own parameter groups"):
        trainer.create_optimizer()


def test_a_resumed_loraplus_schedule_keeps_the_b_matrices_ratio():
    """On resume the base rate is the config's `lr`: with LoRA+ the fastest group runs at lr x ratio, which is
    not a changed `lr` to scale every group down by."""
    from types import SimpleNamespace

    from autotrain.training.checkpoints import ResumedSchedule

    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([{"params": [a], "lr": 1e-3}, {"params": [b], "lr": 16e-3}])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / 10)
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    said = []
    ResumedSchedule(1e-3, said.append, highest=16).on_train_begin(
        None, SimpleNamespace(global_step=4), None, optimizer=optimizer, lr_scheduler=scheduler
    )
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([0.6e-3, 9.6e-3]) and not said
    ResumedSchedule(2e-3, said.append, highest=16).on_train_begin(
        None, SimpleNamespace(global_step=4), None, optimizer=optimizer, lr_scheduler=scheduler
    )
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([1.2e-3, 19.2e-3])
    assert said == ["learning rate: 0.001 -> 0.002 from step 4 on"]


# --- each method trains ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "peft",
    [{"use_dora": True}, {"use_rslora": True}, {"init": "gaussian"}, {"loraplus_lr_ratio": 16}],
    ids=["dora", "rslora", "gaussian", "loraplus"],
)
def test_each_method_moves_every_trainable_parameter(tmp_path, peft):
    from autotrain.trainers import build_trainer

    cfg = config(tmp_path, peft)
    trainer, _ = build_trainer(cfg, resolve_plan(cfg, device="cpu"), callbacks=[])
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged
    if peft.get("use_dora"):
        assert any("lora_magnitude_vector" in n for n in before)


def _train(cli, tmp_path: Path, peft: dict) -> Path:
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path, {**peft, "merge_adapter": True})))
    result = cli("llm", "--config", path)
    assert result.exit_code == 0, result.output
    return tmp_path / "run"


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(torch.tensor([[1, 5, 9, 33, 7, 100, 12, 3]])).logits


@pytest.mark.parametrize("init", ["pissa", "olora"])
def test_pissa_and_olora_save_a_plain_lora_adapter_on_the_unchanged_base(cli, tmp_path, init):
    """The run trains the adapter PiSSA / OLoRA started from the base weights (leaving the residual in the base)
    and saves it converted: rank 2r, [trained | initial] halves, on the base model as it was. That adapter on the
    base gives the logits of the trained model (its `merged/` copy, merged in memory at the end)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = _train(cli, tmp_path, {"init": init, **({"pissa_niter": 2} if init == "pissa" else {})})
    state = json.loads((run / "trainer_state.json").read_text())
    assert all(math.isfinite(e["loss"]) for e in state["log_history"] if "loss" in e)
    saved = json.loads((run / "adapter_config.json").read_text())
    assert (saved["r"], saved["lora_alpha"], saved["init_lora_weights"]) == (8, 16, True)
    assert not (run / "initial_adapter").exists()
    on_base = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(TINY), str(run)).merge_and_unload()
    trained = AutoModelForCausalLM.from_pretrained(run / "merged")
    base = _logits(AutoModelForCausalLM.from_pretrained(TINY))
    assert torch.allclose(_logits(on_base), _logits(trained), atol=1e-5)
    assert not torch.allclose(base, _logits(trained), atol=1e-3)  # and it did learn something
    # every trained matrix moved from its start: the converted halves differ (A: [A; A0], B: [B | -B0])
    weights = load_file(run / "adapter_model.safetensors")
    for name, tensor in weights.items():
        trained_half, start = (tensor[:4], tensor[4:]) if "lora_A" in name else (tensor[:, :4], -tensor[:, 4:])
        assert not torch.equal(trained_half, start), name
    # A resumed run rebuilds the same start (the base's residual must be the one the adapter trained on)
    from autotrain.trainers import build_trainer

    cfg = config(tmp_path, {"init": init, **({"pissa_niter": 2} if init == "pissa" else {})})
    build_trainer(cfg, resolve_plan(cfg, device="cpu"), callbacks=[])
    rebuilt = load_file(run / "initial_adapter" / "adapter_model.safetensors")
    assert rebuilt.keys() == weights.keys()
    for name, start in rebuilt.items():
        converted = weights[name]
        assert torch.equal(start, converted[4:] if "lora_A" in name else -converted[:, 4:]), name
    card = (run / "README.md").read_text()
    assert f"init {init if init == 'olora' else 'pissa_niter_2'}" in card and "plain LoRA adapter of rank 8" in card
    recorded = json.loads((run / "run.json").read_text())["plan"]["adapter"]
    assert recorded["init_lora_weights"] == (init if init == "olora" else "pissa_niter_2")


def test_the_dry_run_names_the_adapter(cli, tmp_path):
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path, {"use_dora": True, "loraplus_lr_ratio": 16})))
    result = cli("llm", "--config", path, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "adapter: DoRA, r 4, alpha 8 (scale 2 = alpha / r); LoRA+: B matrices at lr x 16" in result.stdout
    assert "DoRA weight-norm scratch (largest layer)" in result.stdout


# --- every LLM trainer with all-linear ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["sft", "orpo", "dpo", "reward", "grpo", "kto", "clm"])
def test_every_llm_trainer_adapts_every_linear_layer_but_the_output(tmp_path, trainer):
    from autotrain.trainers import build_trainer

    raw = raw_config(tmp_path, {}, trainer, batch_size=2)
    if trainer == "kto":
        from test_kto import kto_data, unpaired

        raw["data"] = kto_data(unpaired(tmp_path))
    if trainer == "grpo":
        raw["data"] = {
            "path": str(ASSETS / "data" / "math.jsonl"),
            "column_mapping": {"prompt": "question", "answer": "answer"},
        }
        raw["training_args"].update(num_generations=2, max_completion_length=8)
    cfg = load_data(raw, Locator("config.yml"), environ={}).config
    built, _ = build_trainer(cfg, resolve_plan(cfg, device="cpu"), callbacks=[])
    adapted, linear = _adapted_and_linear(built.model)
    assert linear - adapted == {"score" if trainer == "reward" else "lm_head"}


# --- the memory estimate knows DoRA -------------------------------------------------------------------------


class _Saved:
    """What autograd holds for one saved tensor: it lives exactly as long as the graph keeps the tensor."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


def _kept_bytes(model, ids) -> int:
    """Bytes autograd still keeps for backward once the forward pass is done (weights left out)."""
    import gc
    import weakref

    weights = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    held = []

    def pack(tensor):
        saved = _Saved(tensor)
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            held.append((weakref.ref(saved), storage._cdata, storage.nbytes()))
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved.tensor):
        out = model(input_ids=ids, labels=ids)
    gc.collect()
    kept = {storage: nbytes for ref, storage, nbytes in held if ref() is not None}
    del out
    return sum(kept.values())


@pytest.mark.parametrize("dropout", [0.0, 0.05])
def test_the_estimate_traces_dora_as_peft_computes_it(tmp_path, dropout):
    """The trace's DoRA layers keep what peft's keep for backward (the base output and the adapter's, scaled;
    with dropout the base output of the dropped input too) and count the magnitudes among the trained values."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from autotrain.trainers.llm.model import build_lora_config
    from autotrain.training.model_shape import trace_model

    config_json = (Path(TINY) / "config.json").read_text()
    ids = torch.randint(0, 100, (1, 64))
    measured, traced = {}, {}
    for dora in (False, True):
        lora = build_lora_config(config(tmp_path, {"use_dora": dora, "dropout": dropout}))
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(TINY), lora).train()
        measured[dora] = _kept_bytes(model, ids)
        shape = trace_model(config_json, "llm", 64, "float32", "sdpa", (4, "all-linear", dropout, dora), True, "cpu")
        traced[dora] = 64 * (shape.layers * shape.layer_bytes_per_token + shape.rest_bytes_per_token)
        assert shape.lora_params == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert measured[True] > 1.5 * measured[False]  # DoRA keeps far more than LoRA ...
    assert traced[True] == pytest.approx(measured[True], rel=0.10)  # ... and the trace says how much


def test_the_estimate_adds_doras_weight_norm_scratch_only_with_dora():
    from autotrain.training.memory import Setup, dora_terms, estimate
    from autotrain.training.model_shape import trace_model

    config_json = (Path(TINY) / "config.json").read_text()
    spec = json.loads(config_json)
    widest_in = spec["intermediate_size"]  # down_proj: intermediate -> hidden, the largest identity matrix
    runs = {}
    for dora in (False, True):
        lora = (4, "all-linear", 0.0, dora)
        shape = trace_model(config_json, "llm", 64, "float32", "sdpa", lora, True, "cpu")
        setup = Setup("sft", 4, 64, False, "adamw_torch", "no", "cpu", lora, None)
        runs[dora] = (shape, estimate(shape, setup), dora_terms(shape, setup))
    assert runs[False][2] == {}
    shape, estimated, terms = runs[True]
    scratch = 4 * (widest_in * widest_in + widest_in * spec["hidden_size"])
    assert terms == {"DoRA weight-norm scratch (largest layer)": scratch}
    assert estimated.parts["DoRA weight-norm scratch (largest layer)"] == scratch
    assert estimated.peak > runs[False][1].peak + scratch


# --- seq2seq and vlm: the same variants through their own builders ------------------------------------------


def _merged_state_on_base(auto_cls, base: Path, run: Path) -> dict[str, torch.Tensor]:
    from peft import PeftModel

    return PeftModel.from_pretrained(auto_cls.from_pretrained(base), str(run)).merge_and_unload().state_dict()


def _train_task(cli, tmp_path: Path, task: str, model: Path, data: dict, peft: dict, **training) -> Path:
    raw = {
        "task": task, "base_model": str(model), "project_name": str(tmp_path / "run"), "data": data,
        "peft": {"r": 4, "alpha": 8, "dropout": 0.0, "merge_adapter": True, **peft},
        "training_args": {"max_steps": 4, "batch_size": 8, "lr": 1e-2, "eval_strategy": "no", "save_steps": 1000,
                          "logging_steps": 1, **training},
    }  # fmt: skip
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(raw))
    result = cli(task, "--config", path)
    assert result.exit_code == 0, result.output
    return tmp_path / "run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, peft",
    [("seq2seq", {"init": "pissa", "use_rslora": True, "loraplus_lr_ratio": 4}),
     ("vlm", {"init": "olora", "loraplus_lr_ratio": 4}),
     ("vlm", {"use_dora": True})],
    ids=["seq2seq-pissa-rslora-loraplus", "vlm-olora-loraplus", "vlm-dora"],
)  # fmt: skip
def test_seq2seq_and_vlm_train_the_variants_and_save_what_they_trained(cli, tmp_path, task, peft):
    """The adapter the run saved, put on the base model, holds the weights of the trained model (`merged/`)."""
    import random

    if task == "seq2seq":
        from text_tasks_assets import seq2seq_rows, tiny_t5, write_rows
        from transformers import AutoModelForSeq2SeqLM as auto_cls

        model = tiny_t5(tmp_path / "t5")
        write_rows(tmp_path / "data" / "train.jsonl", seq2seq_rows(random.Random(0), 64))
        data = {"path": str(tmp_path / "data"), "valid_size": 0.1, "column_mapping": {"target": "summary"}}
        extra = {"max_length": 16, "max_target_length": 8}
    else:
        from transformers import AutoModelForImageTextToText as auto_cls
        from vision_assets import tiny_idefics3, vqa_rows, write_jsonl

        model = tiny_idefics3(tmp_path / "idefics3")
        write_jsonl(
            tmp_path / "data" / "train" / "metadata.jsonl", vqa_rows(tmp_path / "data" / "train", random.Random(0), 32)
        )
        data = {"path": str(tmp_path / "data"), "valid_size": 0.25, "column_mapping": {"prompt": "question"}}
        extra = {"max_length": 64, "max_new_tokens": 4}
    run = _train_task(cli, tmp_path, task, model, data, peft, **extra)
    state = json.loads((run / "trainer_state.json").read_text())
    assert all(math.isfinite(e["loss"]) for e in state["log_history"] if "loss" in e)
    converted = peft.get("init") in ("pissa", "olora")
    assert json.loads((run / "adapter_config.json").read_text())["r"] == (8 if converted else 4)
    on_base = _merged_state_on_base(auto_cls, model, run)
    trained = auto_cls.from_pretrained(run / "merged").state_dict()
    base = auto_cls.from_pretrained(model).state_dict()
    moved = [name for name, value in trained.items() if not torch.equal(value, base[name])]
    assert moved and all(torch.allclose(on_base[name], trained[name], atol=1e-5) for name in trained)
