"""`autotrain app`: the JSON API (validation, runs, start / stop / resume), path confinement, the token."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason='the app needs its extra: pip install -e ".[app]"')

from fastapi.testclient import TestClient  # noqa: E402

from autotrain.app.server import create_app  # noqa: E402
from autotrain.app.yaml_edit import set_value  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = REPO_ROOT / "configs" / "llm" / "quickstart.yml"
BAD = "task: llm\nbase_model: m\nproject_name: p\ndata: {path: d.jsonl}\ntraining_args:\n  lr: -1\n  batch_sise: 4\n"


def quickstart(runs: Path, name: str, **training) -> str:
    """The quick start config, training into `runs/name`, with `training_args` changed as given."""
    text = set_value(QUICKSTART.read_text(), ["project_name"], str(runs / name))
    for key, value in training.items():
        text = set_value(text, ["training_args", key], value)
    return text


@pytest.fixture
def runs(tmp_path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def client(runs) -> TestClient:
    return TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1")


def wait_for(client: TestClient, name: str, done, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/api/runs/{name}").json()
        if done(run):
            return run
        time.sleep(0.3)
    raise AssertionError(f"timed out; last state: {json.dumps(run)[:2000]}")


# --- validation, templates, schema, YAML edits ----------------------------------------------------------


def test_validate_ok(client):
    result = client.post("/api/validate", content=QUICKSTART.read_text()).json()
    assert result["ok"] is True and result["problems"] == []
    assert result["data"]["training_args"]["batch_size"] == 8


def test_validate_reports_line_column_path_and_the_cli_message(client):
    result = client.post("/api/validate", content=BAD).json()
    assert result["ok"] is False
    lr, typo = result["problems"]
    assert (lr["line"], lr["column"], lr["path"]) == (6, 3, "training_args.lr")
    assert "greater than 0" in lr["message"]
    assert typo["path"] == "training_args.batch_sise" and "did you mean `batch_size`?" in typo["message"]


def test_validate_reports_yaml_syntax_errors_with_their_line(client):
    result = client.post("/api/validate", content="task: llm\ndata: [unclosed\n").json()
    assert result["ok"] is False and result["problems"][0]["line"] == 3
    assert "invalid YAML" in result["problems"][0]["message"]


def test_templates_and_schema(client):
    names = {t["name"]: t for t in client.get("/api/templates").json()}
    assert "llm/quickstart.yml" in names and names["llm/sft.yml"]["default"]
    assert names["llm/dpo.yml"]["trainer"] == "dpo"
    schemas = client.get("/api/schema/llm").json()
    lr = schemas["schema"]["$defs"]["LLMTrainingArgs"]["properties"]["lr"]
    assert lr["exclusiveMinimum"] == 0 and lr["description"]
    assert "block_size" in schemas["optimizers"]["came_8bit"]["properties"]
    assert client.get("/api/schema/nope").status_code == 404


def test_the_schema_served_lists_every_trainer_of_the_table(client):
    """The page reads the trainer choices from /api/schema, so a trainer added to the table shows up there."""
    from autotrain.config.trainers import TRAINERS

    schemas = client.get("/api/schema/llm").json()
    assert list(schemas["trainers"]) == list(TRAINERS)
    assert schemas["schema"]["properties"]["trainer"]["enum"] == list(TRAINERS)
    assert schemas["trainers"]["grpo"]["columns"] == [["prompt"]] and schemas["trainers"]["grpo"]["generates"]
    assert "trainers" not in client.get("/api/schema/text-classification").json()


def test_a_form_edit_keeps_the_rest_of_the_yaml(client):
    text = QUICKSTART.read_text()
    result = client.post("/api/yaml/set", json={"text": text, "path": ["training_args", "lr"], "value": -1}).json()
    assert result["text"].count("#") == text.count("#") and "  lr: -1\n" in result["text"]
    assert result["ok"] is False and result["problems"][0]["path"] == "training_args.lr"
    added = client.post("/api/yaml/set", json={"text": text, "path": ["peft", "r"], "value": 8}).json()
    assert added["text"].endswith("peft:\n  r: 8\n") and added["data"]["peft"] == {"r": 8}
    removed = client.post("/api/yaml/set", json={"text": text, "path": ["training_args", "lr"], "unset": True})
    assert "lr:" not in removed.json()["text"]


def test_configs_are_saved_and_opened_inside_the_runs_dir(client, runs):
    assert client.put("/api/configs/mine.yml", content="task: llm\n").json()["saved"] is True
    assert (runs / "mine.yml").read_text() == "task: llm\n"
    assert client.get("/api/configs").json() == ["mine.yml"]
    assert client.get("/api/configs/mine.yml").json()["text"] == "task: llm\n"
    assert client.put("/api/configs/notes.txt", content="x").status_code == 400


# --- runs -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_start_stop_resume_the_quick_start(client, runs):
    text = quickstart(runs, "qs", max_steps=40, logging_steps=1)
    started = client.post("/api/runs", json={"yaml": text})
    assert started.status_code == 200, started.text
    assert started.json()["config"] == "qs.yml" and (runs / "qs.yml").read_text() == text
    running = wait_for(client, "qs", lambda r: r["progress"]["step"] >= 3 or r["status"] != "running")
    assert running["status"] == "running", running["log"]
    assert client.get("/api/runs").json()[0]["status"] == "running"
    assert client.post("/api/runs/qs/resume").status_code == 409  # already running
    assert client.post("/api/runs/qs/stop").json()["signal"] == "SIGTERM"

    stopped = wait_for(client, "qs", lambda r: r["status"] != "running")
    assert (stopped["status"], stopped["exit_code"]) == ("interrupted", 143), stopped["log"]
    checkpoints = sorted(runs.glob("qs/checkpoint-*"))
    assert len(checkpoints) == 1 and (checkpoints[0] / ".autotrain-complete").is_file()
    assert 3 <= int(checkpoints[0].name.split("-")[1]) < 40
    assert "saving a checkpoint" in stopped["log"]
    assert any(f["path"] == checkpoints[0].name for f in stopped["files"])

    assert client.post("/api/runs/qs/resume").json()["resume"] is True
    done = wait_for(client, "qs", lambda r: r["status"] != "running")
    assert (done["status"], done["exit_code"]) == ("completed", 0), done["log"]
    assert done["progress"]["step"] == 40 and done["progress"]["loss"] < 5.8
    steps = [r["step"] for r in done["records"] if "loss" in r]
    assert steps[0] == 1 and steps[-1] == 40  # the live log holds both halves of the run
    files = {f["path"] for f in done["files"]}
    assert {"plots/loss.png", "logs/metrics.jsonl", "logs/app.log", "model.safetensors", "README.md"} <= files
    png = client.get("/api/runs/qs/files/plots/loss.png")
    assert png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
    assert "![loss](plots/loss.png)" in client.get("/api/runs/qs/files/README.md").text
    assert client.get("/api/runs/qs?since=1000").json()["records"] == []


def test_start_is_refused_with_the_reason(client, runs):
    bad = client.post("/api/runs", json={"yaml": BAD})
    assert bad.status_code == 400 and bad.json()["problems"][0]["path"] == "training_args.lr"
    elsewhere = client.post("/api/runs", json={"yaml": quickstart(runs.parent, "outside")})
    assert elsewhere.status_code == 400 and "directly inside the runs dir" in elsewhere.json()["error"]
    (runs / "done").mkdir(parents=True)
    (runs / "done" / "run.json").write_text('{"status": "completed"}')
    taken = client.post("/api/runs", json={"yaml": quickstart(runs, "done")})
    assert taken.status_code == 409 and "already holds a run" in taken.json()["error"]
    assert client.post("/api/runs/done/stop").status_code == 409
    assert client.post("/api/runs/done/resume").status_code == 409  # no checkpoint
    assert client.get("/api/runs").json()[0]["status"] == "completed"
    assert client.get("/api/runs/missing").status_code == 404


# --- safety ---------------------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path, runs) -> Path:
    """A secret file next to the runs dir, and links to it from inside."""
    secret = tmp_path / "secret.yml"
    secret.write_text("password: hunter2\n")
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "link.yml").symlink_to(secret)
    (runs / "linked-run").symlink_to(tmp_path)
    (runs / "real").mkdir()
    (runs / "real" / "run.json").write_text("{}")
    (runs / "real" / "out.json").symlink_to(secret)
    return secret


@pytest.mark.parametrize(
    "method, url, body",
    [
        ("GET", "/api/configs/%2E%2E/secret.yml", None),
        ("GET", "/api/configs/..%2Fsecret.yml", None),
        ("GET", "/api/configs/%2Fetc%2Fpasswd.yml", None),
        ("GET", "/api/configs/link.yml", None),
        ("PUT", "/api/configs/%2E%2E/evil.yml", "task: llm"),
        ("GET", "/api/runs/linked-run", None),
        ("GET", "/api/runs/%2E%2E", None),
        ("GET", "/api/runs/real/files/..%2F..%2Fsecret.yml", None),
        ("GET", "/api/runs/real/files/%2Fetc%2Fpasswd", None),
        ("GET", "/api/runs/real/files/out.json", None),
        ("POST", "/api/runs", {"path": "../secret.yml"}),
        ("POST", "/api/runs", {"path": "/etc/passwd.yml"}),
        ("POST", "/api/runs", {"path": "link.yml"}),
    ],
)
def test_paths_are_confined_to_the_runs_dir(client, outside, method, url, body):
    kwargs = {"json": body} if isinstance(body, dict) else {"content": body}
    response = client.request(method, url, **kwargs)
    assert response.status_code == 400, response.text
    assert "hunter2" not in response.text
    assert not (outside.parent / "evil.yml").exists()


def test_links_out_of_the_runs_dir_are_not_listed(client, outside):
    assert [r["name"] for r in client.get("/api/runs").json()] == ["real"]
    assert "link.yml" in client.get("/api/configs").json()  # listed by name, refused when opened


def test_a_token_is_required_when_the_app_is_reachable_from_elsewhere(runs):
    client = TestClient(create_app(runs, REPO_ROOT, token="s3cret-token"), base_url="http://192.0.2.1")
    assert client.get("/api/runs").status_code == 401
    assert client.get("/").status_code == 401
    assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.get("/api/runs", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    assert client.get("/api/runs?token=s3cret-token").status_code == 200
    assert client.get("/static/app.css").status_code == 200  # the page's own code is no secret


def test_serve_asks_for_a_token_off_loopback_only():
    from autotrain.app.security import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.4", "::", "example.com"))


def test_other_sites_are_refused(client):
    assert client.get("/api/runs", headers={"Host": "evil.example:7860"}).status_code == 403  # DNS rebinding
    cross = client.post("/api/runs", json={"path": "x.yml"}, headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert client.get("/api/runs", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert client.get("/api/runs", headers={"Origin": "http://127.0.0.1"}).status_code == 200


def test_secrets_never_leave_the_app(client, runs, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_env_secret_value")
    literal = BAD.replace("training_args:", "hub: {token: hf_literal_token}\ntraining_args:")
    result = client.post("/api/validate", content=literal)
    assert "hf_literal_token" not in result.text and result.json()["data"]["hub"]["token"] == "***"
    (runs / "r" / "logs").mkdir(parents=True)
    (runs / "r" / "logs" / "app.log").write_text("using hf_env_secret_value\n")
    (runs / "r" / "notes.json").write_text('{"k": "hf_env_secret_value"}')
    assert "hf_env_secret_value" not in client.get("/api/runs/r").text
    assert client.get("/api/runs/r/files/notes.json").text == '{"k": "***"}'


# --- the command ----------------------------------------------------------------------------------------


def test_the_command_explains_how_to_install_the_extra(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)
    result = cli("app")
    assert result.exit_code == 2 and "pip install 'autotrain[app]'" in result.output


def test_the_app_serves_the_page_from_the_package(runs, app_server):
    import urllib.request

    url, seconds = app_server(runs)  # the fixture gives the app 60 s to answer: a guard against a hang
    print(f"\napp start-up to first HTTP 200: {seconds:.2f} s")
    with urllib.request.urlopen(url + "static/js/main.js") as response:
        assert response.status == 200 and b"initEditor" in response.read()


def test_the_app_does_not_load_the_training_stack():
    code = "import sys, autotrain.app.server; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_app_reads_the_metrics_file_the_runs_write():
    from autotrain.app.runinfo import METRICS_FILE
    from autotrain.training import metrics_log

    assert METRICS_FILE == metrics_log.METRICS_FILE


# --- the form, status and finished runs -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, path",
    [
        ("task: llm\ntraining_args:\n  lr: 1\n  optimizer_args:\n    beta1: 0.9\n  epochs: 2\n", "optimizer_args"),
        ("task: llm\ndata:\n  path: d.jsonl\n  column_mapping:\n    text: body\n", "column_mapping"),
        ("task: llm\ndata: {path: d.jsonl, column_mapping: {text: body}}\n", "column_mapping"),
    ],
)
def test_clearing_the_only_key_of_a_mapping_removes_the_mapping(client, text, path):
    import yaml

    keys = {
        "optimizer_args": ["training_args", "optimizer_args", "beta1"],
        "column_mapping": ["data", "column_mapping", "text"],
    }
    result = client.post("/api/yaml/set", json={"text": text, "path": keys[path], "unset": True}).json()
    assert f"{path}" not in result["text"]
    data = yaml.safe_load(result["text"])
    assert data["task"] == "llm" and (
        data.get("training_args", {}).get("epochs") == 2 or data["data"]["path"] == "d.jsonl"
    )


def test_start_refuses_a_config_whose_data_file_does_not_exist(client, runs):
    text = set_value(quickstart(runs, "nodata"), ["data", "path"], "tests/assets/data/missing.jsonl")
    response = client.post("/api/runs", json={"yaml": text})
    assert response.status_code == 400
    assert "data.path `tests/assets/data/missing.jsonl` does not exist" in response.json()["error"]
    assert not (runs / "nodata").exists() and not (runs / "nodata.yml").exists()


@pytest.mark.parametrize("code, status", [(1, "failed"), (2, "bad input"), (3, "diverged"), (143, "interrupted")])
def test_a_run_that_ended_without_its_record_shows_how_it_ended(runs, code, status):
    from autotrain.app.runs import Runs

    class Ended:
        pid = 1

        def poll(self):
            return code

    (runs / "r" / "logs").mkdir(parents=True)
    app_runs = Runs(runs, REPO_ROOT, children={"r": Ended()})
    assert app_runs.status("r") == {"status": status, "exit_code": code, "pid": None}


def test_resume_is_refused_on_a_completed_run(client, runs):
    (runs / "done" / "checkpoint-4").mkdir(parents=True)
    (runs / "done" / "checkpoint-4" / ".autotrain-complete").write_text("")
    (runs / "done" / "checkpoint-4" / "trainer_state.json").write_text("{}")
    (runs / "done" / "run.json").write_text('{"status": "completed"}')
    response = client.post("/api/runs/done/resume")
    assert response.status_code == 409 and "nothing to resume" in response.json()["error"]


def test_the_page_reads_its_lists_from_the_schema(client):
    from autotrain.config.templates import TASKS

    assert client.get("/api/schema").json()["tasks"] == list(TASKS)
    trainer = client.get("/api/schema/llm").json()["schema"]["properties"]["trainer"]
    assert "grpo" in trainer["enum"]
    editor = (REPO_ROOT / "autotrain/app/static/js/editor.js").read_text()
    assert '"sft"' not in editor and '"text-classification"' not in editor  # no list of its own


def test_a_finished_run_shows_its_benchmarks_beside_the_charts(client, runs):
    folder = runs / "done"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text('{"status": "completed"}')
    assert client.get("/api/runs/done").json()["benchmarks"] is None  # none yet: the table stays hidden
    row = {"task": "arc_easy", "metric": "acc", "base": 0.5, "base_stderr": 0.05, "trained": 0.6,
           "trained_stderr": 0.05, "difference": 0.1, "difference_stderr": 0.03, "limit": 100}  # fmt: skip
    (folder / "benchmarks.json").write_text(json.dumps({"base_model": "m", "rows": [row, "not a row"]}))
    shown = client.get("/api/runs/done").json()["benchmarks"]
    assert shown["base_model"] == "m" and len(shown["rows"]) == 1
    assert shown["rows"][0] == {k: row[k] for k in shown["rows"][0]} and shown["rows"][0]["difference_stderr"] == 0.03
    page = (REPO_ROOT / "autotrain/app/static/index.html").read_text()
    charts = page[page.index('<div class="charts">') : page.index('<div id="plots">')]
    assert 'id="fig-benchmarks"' in charts and 'id="bench-table"' in charts  # beside the loss charts
    script = (REPO_ROOT / "autotrain/app/static/js/runs.js").read_text()
    assert "textContent = text" in script and "innerHTML" not in script[script.index("function drawBenchmarks") :][:900]


def test_the_model_card_is_rendered_safely(client, runs):
    (runs / "done").mkdir(parents=True)
    (runs / "done" / "run.json").write_text('{"status": "completed"}')
    (runs / "done" / "README.md").write_text(
        "---\nlibrary_name: transformers\n---\n\n# done\n\n<img src=x onerror=alert(1)>\n\n"
        "| metric | value |\n|---|---|\n| loss | 1.5 |\n\n- [bad](javascript:alert(1))\n- [site](https://example.com)\n\n"
        "![loss](plots/loss.png)\n\n```\nx = '<b>'\n```\n"
    )
    html = client.get("/api/runs/done/card").json()["html"]
    assert "<h1>done</h1>" in html and "<td>loss</td>" in html and "<li>" in html
    assert "library_name" not in html  # the front matter is metadata, not the card
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'href="javascript:' not in html and 'rel="noopener noreferrer"' in html
    assert '<img src="/api/runs/done/files/plots/loss.png" alt="loss"' in html
    assert "<code>x = '&lt;b&gt;'" in html
    assert client.get("/api/runs/missing/card").status_code == 404


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "give {"),
        ({"messages": [{"role": "user", "content": "x" * 5000}]}, "at most 4,000"),
        ({"messages": [{"role": "user", "content": "hi"}] * 41}, "at most 40"),
        ({"messages": [{"role": "system", "content": "hi"}]}, "each message is"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_new_tokens": 10**6}, "max_new_tokens"),
    ],
)
def test_chat_input_is_bounded(client, runs, body, message):
    (runs / "done").mkdir(parents=True)
    response = client.post("/api/runs/done/chat", json=body)
    assert response.status_code == 400 and message in response.json()["error"]


def test_chat_needs_a_finished_run(client, runs):
    (runs / "half" / "checkpoint-2").mkdir(parents=True)
    response = client.post("/api/runs/half/chat", json={"messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400 and "did not finish" in response.json()["error"]


@pytest.mark.slow
def test_chat_with_a_finished_run_is_streamed(client, runs):
    from tests.test_inference import train_quickstart

    (runs.parent / "train").mkdir()
    train_quickstart(runs.parent / "train", "llm", training_args={"epochs": 1}).rename(runs / "talk")
    messages = [{"role": "user", "content": "hello"}]
    pieces = []
    with client.stream("POST", "/api/runs/talk/chat", json={"messages": messages, "max_new_tokens": 24}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        pieces = [piece for piece in response.iter_text() if piece]
    assert len(pieces) >= 2 and "".join(pieces).strip()  # streamed in pieces, not as one answer


# --- the command: port and addresses --------------------------------------------------------------------


def test_the_command_names_a_port_in_use_and_exits_2(cli):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("app", "--port", port)
    assert result.exit_code == 2 and "autotrain app:" not in result.output
    assert f"port {port} on 127.0.0.1 is in use" in result.output and f"--port {port + 1}" in result.output


def test_token_mode_prints_addresses_another_machine_can_open(monkeypatch):
    from autotrain.app import listen

    monkeypatch.setattr(listen.socket, "gethostname", lambda: "trainbox")
    monkeypatch.setattr(listen, "_own_addresses", lambda: ["192.0.2.7"])
    assert listen.addresses("0.0.0.0", 7860) == ["http://trainbox:7860/", "http://192.0.2.7:7860/"]
    assert listen.addresses("::", 80) == ["http://trainbox:80/", "http://192.0.2.7:80/"]
    assert listen.addresses("192.0.2.9", 7860) == ["http://192.0.2.9:7860/"]
    assert listen.addresses("::1", 7860) == ["http://[::1]:7860/"]


def test_a_secret_in_a_streamed_reply_is_redacted_even_split_across_pieces():
    from autotrain.app.chat import redacted

    pieces = ["the tok", "en is hf_sec", "ret_value, ", "done hf_secret_v", "alue"]
    out = list(redacted(iter(pieces), {"hf_secret_value", ""}))
    assert "".join(out) == "the token is ***, done ***" and len(out) > 1
    assert list(redacted(iter(["a", "b"]), set())) == ["a", "b"]


def test_in_the_docker_image_the_app_listens_for_the_host_and_says_which_port_the_browser_uses(
    monkeypatch, capsys, tmp_path
):
    """The image sets AUTOTRAIN_CONTAINER: the app listens on every interface (127.0.0.1 in a container is
    out of the host's reach) and takes the token from AUTOTRAIN_APP_TOKEN when one is given. Inside, the host
    port published for its port is not known (`-p 8080:7860`): it says the port it listens on and that the
    browser uses the published one, or prints the address given by AUTOTRAIN_APP_URL / --url as it is."""
    from autotrain.app import lifecycle, listen

    assert listen.default_host() == "127.0.0.1"
    monkeypatch.setenv("AUTOTRAIN_CONTAINER", "docker")
    monkeypatch.setenv("AUTOTRAIN_APP_TOKEN", "a-token-chosen-by-the-user")
    assert listen.default_host() == "0.0.0.0"
    assert listen.addresses("127.0.0.1", 7860) == ["http://127.0.0.1:7860/"]  # as asked

    served = []
    monkeypatch.setattr(lifecycle, "serve_until_stopped", lambda server, sock, runs, wait: served.append(wait) or 143)
    assert listen.serve(None, "0.0.0.0", 7860, tmp_path) == 143
    printed = capsys.readouterr().out
    assert "autotrain app: listening on port 7860 inside the container" in printed
    assert "open http://localhost:HOST_PORT/?token=a-token-chosen-by-the-user from the host" in printed
    assert "docker run -p N:7860" in printed and "localhost:7860" not in printed
    assert listen.serve(None, "0.0.0.0", 7860, tmp_path, url="http://localhost:8080") == 143
    printed = capsys.readouterr().out
    assert "autotrain app: http://localhost:8080/?token=a-token-chosen-by-the-user\n" in printed
    assert "(listening on 0.0.0.0:7860)" in printed and served == [240, 240]


def test_the_address_to_print_comes_from_the_environment_and_a_bad_one_is_refused(cli):
    import socket

    with socket.socket() as taken:  # were the address not checked first, the app would stop at the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = cli("app", "--port", taken.getsockname()[1], env={"AUTOTRAIN_APP_URL": "localhost:8080"})
    assert result.exit_code == 2
    assert "--url / AUTOTRAIN_APP_URL must be the address a browser opens" in result.stderr


@pytest.mark.parametrize("token", ["short", "x" * 20 + " y", "é" * 20])
def test_a_token_too_weak_or_unprintable_is_refused_before_listening(cli, token):
    result = cli("app", "--port", "1", env={"AUTOTRAIN_APP_TOKEN": token})
    assert result.exit_code == 2 and "AUTOTRAIN_APP_TOKEN must be at least 16" in result.stderr
