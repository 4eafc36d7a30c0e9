"""`autotrain export` on the tiny Llama (tests/assets/tiny-llama) taken as a finished run: GGUF and Ollama
exports read back through transformers' own GGUF loader and pass the parity check; a wrong Q/K layout fails
it; bad input is one line and exit 2 with nothing left under the output's name."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from autotrain.errors import EXIT_PARITY

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "assets" / "tiny-llama"
CHAT = REPO / "tests" / "assets" / "data" / "chat.jsonl"

pytestmark = pytest.mark.usefixtures("one_thread")


def make_run(folder: Path, weights: Path = TINY, status: str = "completed", **config) -> Path:
    """A project folder as a finished full fine-tune leaves it: the model, its config, run.json."""
    shutil.copytree(weights, folder)
    cfg = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": "runs/tiny",
        "data": {"path": str(CHAT), "column_mapping": {"messages": "messages"}},
        **config,
    }
    (folder / "autotrain.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    (folder / "run.json").write_text(json.dumps({"status": status}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("export") / "run")


def leftovers(folder: Path) -> list[str]:
    """Staging folders an export did not clean up."""
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def test_gguf_export_reads_back_as_the_trained_model(cli, tiny_run, tmp_path):
    out = tmp_path / "gguf"
    result = cli("export", tiny_run, "--format", "gguf", "--quant", "f16", "-o", out)
    assert result.exit_code == 0, result.output
    assert f"exported: {out / 'run-f16.gguf'}" in result.stdout and "parity passed" in result.stdout
    report = json.loads((out / "export_report.json").read_text())
    assert report["passed"] and report["failures"] == []
    transformers_result = report["parity"]["readers"]["transformers"]
    assert transformers_result["vs_trained"]["agreement_pct"] == 100.0
    assert transformers_result["vs_trained"]["max_logit_diff"] < 1e-3
    assert transformers_result["vs_written_weights"]["max_logit_diff"] < 1e-5
    assert report["parity"]["prompts"] == 8 and "chat.jsonl [train]" in report["parity"]["prompts_source"]
    assert report["parity"]["chat_template"] == {"same_template": True, "conversations": 8, "renders_equal": 8}
    assert report["parity"]["readers"]["llama_cpp"]["exercised"] in (True, False)
    assert "## Export: gguf f16" in (out / "README.md").read_text()

    from autotrain.export.gguf_file import tensor_listing

    listing = tensor_listing(out / "run-f16.gguf")
    tensors = listing["tensors"]
    assert tensors["token_embd.weight"] == {"shape": [64, 320], "type": "F16"}  # GGUF lists dims innermost first
    assert tensors["blk.1.attn_k.weight"] == {"shape": [64, 32], "type": "F16"}
    assert tensors["blk.0.attn_norm.weight"]["type"] == "F32" and "output.weight" not in tensors  # tied
    for key in ("llama.rope.dimension_count", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert key in listing["keys"]


def test_ollama_export_template_renders_the_training_prompt(cli, tiny_run, tmp_path):
    out = tmp_path / "ollama"
    result = cli("export", tiny_run, "--format", "ollama", "--quant", "q8_0", "-o", out)
    assert result.exit_code == 0, result.output
    assert f"ollama create run -f {out / 'Modelfile'}" in result.stdout
    modelfile = (out / "Modelfile").read_text()
    assert modelfile.startswith("FROM ./run-q8_0.gguf\n")
    assert 'PARAMETER stop "<|im_end|>"' in modelfile and "SYSTEM" not in modelfile
    template = modelfile.split('TEMPLATE """', 1)[1].split('"""', 1)[0]

    from transformers import AutoTokenizer

    from autotrain.export.modelfile import render_go

    tokenizer = AutoTokenizer.from_pretrained(tiny_run)
    rows = [json.loads(line) for line in CHAT.read_text().splitlines()[:4]]
    for row in rows:
        conversation = row["messages"][:-1] + [{"role": "user", "content": "and then?"}]
        expected = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        assert render_go(template, conversation) == expected
    report = json.loads((out / "export_report.json").read_text())
    assert report["passed"] and report["modelfile"]["family"] == "chatml"
    assert report["gguf"]["tensor_types"] == {"Q8_0": 15, "F32": 5}


def test_a_lossy_export_passes_by_the_token_rule_it_states(cli, tiny_run, tmp_path):
    """q4_0 changes answers by design: it passes when at least 60% of the trained model's greedy tokens stay
    the export's top token, and the output says so beside the figures."""
    out = tmp_path / "q4"
    result = cli("export", tiny_run, "--quant", "q4_0", "-o", out)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("parity passed: "))
    assert "% of tokens agree" in line and "(q4_0: at least 60% of tokens required)" in line, line
    report = json.loads((out / "export_report.json").read_text())
    assert report["rule"] == "q4_0: at least 60% of tokens required" and report["failures"] == []
    assert "q4_0: at least 60% of tokens required" in (out / "README.md").read_text()


def flat_embeddings(folder: Path) -> Path:
    """The tiny Llama with every embedding value 1 + N(0, 0.03): its tokens differ only in what lies below a
    q4_0 block's step (max / 8), which the file rounds away; q8_0's step (max / 127) keeps most of it."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(TINY, folder)
    weights = load_file(folder / "model.safetensors")
    torch.manual_seed(0)
    embedding = weights["model.embed_tokens.weight"]
    weights["model.embed_tokens.weight"] = (1.0 + 0.03 * torch.randn_like(embedding)).to(embedding.dtype)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_a_lossy_export_that_loses_the_answers_fails_with_exit_4(cli, tmp_path):
    run = make_run(tmp_path / "run", weights=flat_embeddings(tmp_path / "flat"))
    out = tmp_path / "q4"
    result = cli("export", run, "--quant", "q4_0", "-o", out)
    assert result.exit_code == EXIT_PARITY, result.output
    assert "parity check failed: transformers: " in result.stderr
    assert "% of the trained model's greedy tokens are the export's top token (q4_0: at least 60%" in result.stderr
    assert not out.exists() and (tmp_path / "q4.failed" / "export_report.json").is_file()
    report = json.loads((tmp_path / "q4.failed" / "export_report.json").read_text())
    written = report["parity"]["readers"]["transformers"]["vs_written_weights"]
    assert written["max_logit_diff"] < 1e-3  # the file holds what it should: the quantization lost the answers
    assert report["parity"]["readers"]["transformers"]["vs_trained"]["token_agreement_pct"] < 60
    kept = cli("export", run, "--quant", "q8_0", "-o", tmp_path / "q8")  # finer steps keep them
    assert kept.exit_code == 0, kept.output


def test_without_the_llama_cpp_q_k_layout_the_parity_check_fails(cli, tiny_run, tmp_path, monkeypatch):
    """The permutation matters, and the check sees it: unpermuted Q/K weights read back scrambled."""
    from autotrain.export import gguf_file

    monkeypatch.setattr(gguf_file, "permute_for_llama_cpp", lambda weights, n_head, n_head_kv: weights)
    out = tmp_path / "scrambled"
    result = cli("export", tiny_run, "-o", out)
    assert result.exit_code == EXIT_PARITY, result.output
    assert "error: parity check failed: transformers: logits differ by" in result.stderr
    assert not out.exists() and (tmp_path / "scrambled.failed" / "run-f16.gguf").is_file()
    assert not json.loads((tmp_path / "scrambled.failed" / "export_report.json").read_text())["passed"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_each_supported_architecture_reads_back_exactly(tmp_path, model_type):
    """f32 files: transformers' GGUF loader gives back the very logits (Qwen2's biases, grouped KV heads)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from autotrain.export.gguf_file import write_gguf

    config = AutoConfig.for_model(
        model_type, vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    tokenizer = AutoTokenizer.from_pretrained(TINY)
    write_gguf(model, tokenizer, tmp_path / "m.gguf", "f32", "tiny")
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer("what color is the sea?")["input_ids"]])
    with torch.no_grad():
        assert float((model(ids).logits - back(ids).logits).abs().max()) < 1e-5


# --- bad input ---------------------------------------------------------------------------------------------


def test_bad_requests_are_one_line_and_exit_2(cli, tiny_run, tmp_path):
    cases = [
        (("--format", "onnx"), "unknown format `onnx`; one of: merged, gguf, ollama"),
        (("--quant", "q3_k"), "unknown quant `q3_k` for gguf; one of: f32, f16, bf16, q8_0"),
        (("--format", "merged", "--quant", "q8_0"), "unknown dtype `q8_0` for merged; one of: f32, f16, bf16"),
    ]
    for args, message in cases:
        result = cli("export", tiny_run, *args, "-o", tmp_path / "x")
        assert result.exit_code == 2 and message in result.stderr, result.output
    unfinished = make_run(tmp_path / "unfinished", status="interrupted")
    result = cli("export", unfinished)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: `{unfinished}` holds no finished run (status: interrupted): export needs the project folder of a "
        "completed run"
    )
    assert not (tmp_path / "x").exists() and not list(unfinished.glob("export-*"))


def test_an_existing_output_is_replaced_only_with_force_and_only_if_ours(cli, tiny_run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = cli("export", tiny_run, "-o", mine)
    assert result.exit_code == 2 and f"`{mine}` exists; add --force to replace it" in result.stderr
    result = cli("export", tiny_run, "-o", mine, "--force")
    assert result.exit_code == 2 and "is not an autotrain export" in result.stderr
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_classifier_exports_merged_only(cli, tmp_path):
    run = make_run(tmp_path / "classifier", weights=REPO / "tests" / "assets" / "tiny-bert")
    cfg = {"task": "text-classification", "base_model": str(REPO / "tests/assets/tiny-bert"), "project_name": "r",
           "data": {"path": str(REPO / "tests/assets/data/sentiment.csv")}}  # fmt: skip
    (run / "autotrain.yaml").write_text(yaml.safe_dump(cfg))
    result = cli("export", run, "--format", "gguf")
    assert result.exit_code == 2
    assert "holds a text-classification model: it exports as `--format merged` only" in result.stderr
    previous = os.umask(0o022)
    try:
        result = cli("export", run, "--format", "merged", "--quant", "f16")
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    # the merged weights (safetensors writes 0600) are readable as the umask says
    assert stat.S_IMODE((run / "export-merged-f16" / "model.safetensors").stat().st_mode) == 0o644
    report = json.loads((run / "export-merged-f16" / "export_report.json").read_text())
    assert report["passed"] and report["kind"] == "full"
    assert report["parity"]["readers"]["transformers"]["vs_written_weights"]["max_logit_diff"] < 1e-5
    assert (run / "export-merged-f16" / "model.safetensors").is_file()


def test_an_unsupported_architecture_is_refused_before_writing(cli, tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    weights = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=320)).save_pretrained(weights)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY / name, weights / name)
    run = make_run(tmp_path / "gpt2run", weights=weights)
    result = cli("export", run)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: GGUF export does not support the `gpt2` architecture; supported: llama, mistral, qwen2 "
        "(`--format merged` writes any model)"
    )
    assert not (run / "export-gguf-f16").exists() and leftovers(run) == []


def test_a_full_disk_leaves_nothing_under_the_final_name(cli, tiny_run, tmp_path, monkeypatch):
    import gguf

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", full)
    out = tmp_path / "full"
    result = cli("export", tiny_run, "-o", out)
    assert result.exit_code == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: no space left on the device writing `full` in `{tmp_path}`: it needs about ")
    assert last.endswith(" is free; free some space there or choose another -o")
    assert not out.exists() and leftovers(tmp_path) == []


# --- the Modelfile's template families (no model needed) ---------------------------------------------------

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content']"
    " + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
ZEPHYR = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}<|assistant|>\n"


@pytest.mark.parametrize(
    ("template", "family", "default_system"),
    [
        (SMOLLM2, "chatml", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
        (LLAMA3, "llama3", None),
        (MISTRAL, "mistral", None),
        (ZEPHYR, None, None),
    ],
    ids=["smollm2", "llama3", "mistral", "unknown"],
)
def test_chat_families_are_found_by_rendering(template, family, default_system):
    from transformers import AutoTokenizer

    from autotrain.export.modelfile import find_family

    tokenizer = AutoTokenizer.from_pretrained(TINY)
    tokenizer.chat_template = template
    render = lambda m: tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)  # noqa: E731
    prefix = tokenizer.bos_token if template.startswith("{{ bos_token }}") else ""
    found = find_family(render, [], prefix, tokenizer.eos_token)
    assert (found.name if found else None) == family
    if found:
        assert found.default_system == default_system


def test_the_go_template_renderer_handles_else_if_chains_and_trimming():
    from autotrain.export.modelfile import render_go

    template = '{{- range .Messages }}\n{{ if eq .Role "user" }}U:{{ .Content }}{{ else if eq .Role "system" }}S{{ else }}A{{ end }}\n{{- end }}'  # noqa: E501
    messages = [{"role": r, "content": c} for r, c in (("system", ""), ("user", "hi"), ("assistant", ""))]
    assert render_go(template, messages) == "\nS\nU:hi\nA"


# --- the config's `export:` section -----------------------------------------------------------------------


def test_the_export_section_is_checked_with_the_config(cli, tmp_path):
    from autotrain.config.load import load_config

    path = tmp_path / "c.yml"
    base = {"task": "llm", "base_model": str(TINY), "project_name": "runs/x", "data": {"path": str(CHAT)}}
    path.write_text(yaml.safe_dump({**base, "export": {"format": "ollama", "quant": "q4_0"}}))
    assert load_config(path).config.export.quant == "q4_0"
    path.write_text(yaml.safe_dump({**base, "export": {"format": "merged", "quant": "q4_0"}}))
    result = cli("validate", path)
    assert result.exit_code == 2 and "export.quant: unknown dtype `q4_0` for merged" in result.stderr


def test_the_hook_exports_and_pushes_the_gguf_beside_the_model(tmp_path, monkeypatch):
    """What training runs when it ends (run/outputs.py): the export, its card section, the GGUF uploaded."""
    import huggingface_hub

    from autotrain.config.load import load_config
    from autotrain.run import outputs

    run = make_run(tmp_path / "run", status="running")  # run.json says running until the hook returns
    (run / "README.md").write_text("# run\n")
    config = yaml.safe_load((run / "autotrain.yaml").read_text())
    config.update(project_name=str(run), export={"format": "ollama", "quant": "q8_0"})
    config["hub"] = {"push_to_hub": True, "repo_id": "me/model", "token": "${HF_TOKEN}"}
    (tmp_path / "c.yml").write_text(yaml.safe_dump(config))
    loaded = load_config(tmp_path / "c.yml", environ={"HF_TOKEN": "hf_secret"})
    said = []
    code, files = outputs.export_after_training(loaded, said.append)
    assert code == 0 and [f.name for f in files] == ["run-q8_0.gguf", "Modelfile"], said
    assert "## Export: ollama q8_0" in (run / "README.md").read_text()
    uploads = []

    class FakeApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, private, exist_ok):
            return f"https://hub.example/{repo_id}"

        def upload_folder(self, folder_path, repo_id, ignore_patterns, commit_message):
            uploads.append(("folder", ignore_patterns))

        def upload_file(self, path_or_fileobj, path_in_repo, repo_id, commit_message):
            uploads.append((path_in_repo, Path(path_or_fileobj).stat().st_size > 0))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    outputs.push_to_hub(loaded, files)
    assert "export-*/**" in uploads[0][1]  # the export folder itself is not uploaded twice
    assert uploads[1:] == [("run-q8_0.gguf", True), ("Modelfile", True)]


def test_a_sentencepiece_style_vocabulary_reads_back(tmp_path):
    """Mistral and Llama 2 tokenizers (BPE with byte fallback, `▁` for spaces) go in as llama.cpp's `llama`
    vocabulary: scores from the merge order, `<0xNN>` tokens typed BYTE; transformers reads the same ids back."""
    import gguf
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    from autotrain.export.gguf_file import write_gguf

    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    special = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    texts = (REPO / "tests" / "assets" / "data" / "text.jsonl").read_text().splitlines()
    backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=special, show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    config = AutoConfig.for_model(
        "mistral", vocab_size=400, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    summary = write_gguf(AutoModelForCausalLM.from_config(config), tokenizer, tmp_path / "m.gguf", "f16", "spm")
    assert (summary.tokenizer, summary.pre_tokenizer) == ("llama", "default")
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    assert types[3 + 0xC3] == gguf.TokenType.BYTE and types[1] == gguf.TokenType.CONTROL
    back = AutoTokenizer.from_pretrained(tmp_path, gguf_file="m.gguf")
    # Not text that starts with a space: transformers rebuilds this vocabulary with Metaspace, which prefixes
    # one space fewer there than the `Prepend` normalizer does (llama.cpp does as the normalizer).
    for text in ("hello world ü", "the sea is blue.", "Ünïcödé 123", "[INST] what color? [/INST]"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert back(text, add_special_tokens=False)["input_ids"] == ids, text


def test_the_modelfile_carries_the_runs_system_prompt_where_the_template_has_one():
    from autotrain.export.modelfile import FAMILIES, ChatFamily, modelfile_text

    chatml = ChatFamily("chatml", FAMILIES["chatml"][0][0], ("<|im_end|>",), "Default.", "")
    assert 'SYSTEM """Talk like a pirate."""' in modelfile_text("m.gguf", chatml, "Talk like a pirate.")
    assert 'SYSTEM """Default."""' in modelfile_text("m.gguf", chatml, None)  # SmolLM2's own default
    mistral = ChatFamily("mistral", FAMILIES["mistral"][0][0].replace("{EOS}", "</s>"), ("</s>",), None, "<s>")
    assert "SYSTEM" not in modelfile_text("m.gguf", mistral, "Talk like a pirate.")  # its template drops it


def test_the_modelfile_decodes_greedily_as_the_parity_check_did():
    """Ollama samples by default (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1): the export's
    answers would differ from the greedy ones the parity check compared. The Modelfile asks for greedy."""
    from autotrain.export.modelfile import FAMILIES, ChatFamily, modelfile_text

    chatml = ChatFamily("chatml", FAMILIES["chatml"][0][0], ("<|im_end|>",), None, "")
    lines = modelfile_text("m.gguf", chatml, None).splitlines()
    assert "PARAMETER temperature 0" in lines and "PARAMETER repeat_penalty 1" in lines, lines
    assert any(line.startswith("# ") and "greedy" in line for line in lines), lines


def test_the_llama_cpp_reader_is_used_when_installed(cli, tiny_run, tmp_path, monkeypatch):
    """With `llama_cpp` importable its greedy tokens join the check (here a stand-in speaking its API, backed
    by transformers' reading of the same file; the real one runs where llama-cpp-python is installed)."""
    import sys
    import types

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    class Llama:
        def __init__(self, model_path, n_ctx, logits_all, verbose, seed):
            path = Path(model_path)
            self.model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
            self.tokens, self.scores = [], np.zeros((n_ctx, 320), dtype=np.float32)

        n_tokens = property(lambda self: len(self.tokens))

        def reset(self):
            self.tokens = []

        def eval(self, tokens):
            self.tokens += list(tokens)
            with torch.no_grad():
                self.scores[: self.n_tokens] = self.model(torch.tensor([self.tokens])).logits[0].numpy()

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=Llama))
    result = cli("export", tiny_run, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "llama_cpp: 8/8 prompts agree" in result.stdout
    report = json.loads((tmp_path / "out" / "export_report.json").read_text())
    assert report["parity"]["readers"]["llama_cpp"]["max_logit_diff_first_token"] < 1e-3


def test_a_qlora_adapter_is_merged_into_its_unquantized_base(cli, tmp_path):
    """A LoRA run saves only its adapter; export merges it into the base model (a QLoRA run's base loaded
    without quantization) and the result answers like base + adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    adapted = get_peft_model(base, lora)
    run = tmp_path / "qlora"
    adapted.save_pretrained(run)
    AutoTokenizer.from_pretrained(TINY).save_pretrained(run)
    cfg = {"task": "llm", "trainer": "sft", "base_model": str(TINY), "project_name": "runs/q",
           "data": {"path": str(CHAT), "column_mapping": {"messages": "messages"}},
           "peft": {"enabled": True, "r": 4, "alpha": 8, "quantization": "int4"}}  # fmt: skip
    (run / "autotrain.yaml").write_text(yaml.safe_dump(cfg))
    (run / "run.json").write_text('{"status": "completed"}')
    result = cli("export", run, "--format", "merged")
    assert result.exit_code == 0, result.output
    report = json.loads((run / "export-merged-f32" / "export_report.json").read_text())
    assert report["kind"] == "qlora" and report["passed"]
    merged = AutoModelForCausalLM.from_pretrained(run / "export-merged-f32", dtype=torch.float32)
    ids = torch.tensor([[1, 263, 80, 279]])
    with torch.no_grad():
        expected, got = adapted(ids).logits, merged(ids).logits
    assert float((expected - got).abs().max()) < 1e-4
    plain = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)
    with torch.no_grad():
        assert float((plain(ids).logits - got).abs().max()) > 1e-3  # the adapter is in the export


def test_without_the_gguf_package_the_gguf_export_says_what_to_install(cli, tiny_run, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    result = cli("export", tiny_run, "-o", tmp_path / "x")
    assert result.exit_code == 2
    assert "error: GGUF export needs the gguf package: pip install 'autotrain[export]'" in result.stderr


def test_a_killed_exports_staging_folder_is_cleared_by_the_next(tmp_path):
    import os
    import subprocess
    import sys

    from autotrain.export import output

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".out.partial-{done.stdout.strip()}"
    alive = tmp_path / f".out.partial-{os.getppid()}"  # a live process: not ours to clear
    for folder in (dead, alive):
        folder.mkdir()
    stage = output.staging(tmp_path / "out")
    assert not dead.exists() and alive.exists() and stage.is_dir()
