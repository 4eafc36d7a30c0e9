"""`autotrain app` against hostile or odd requests: nothing of the user's is overwritten, a run's files
never run in the app's origin, nothing frames the app, one run per folder however many starts race,
bounded bodies, and a 4xx with a message (never a 500) for requests that are odd but possible."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason='the app needs its extra: pip install -e ".[app]"')

from fastapi.testclient import TestClient  # noqa: E402

from autotrain.app.server import create_app  # noqa: E402
from autotrain.app.yaml_edit import set_value  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = REPO_ROOT / "configs" / "llm" / "quickstart.yml"


def config_for(folder: Path) -> str:
    return set_value(QUICKSTART.read_text(), ["project_name"], str(folder))


@pytest.fixture
def runs(tmp_path) -> Path:
    (tmp_path / "runs").mkdir()
    return tmp_path / "runs"


@pytest.fixture
def client(runs) -> TestClient:
    return TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1")


def finished_run(runs: Path, name: str = "done") -> Path:
    folder = runs / name
    (folder / "logs").mkdir(parents=True)
    (folder / "run.json").write_text('{"status": "completed"}')
    (folder / "autotrain.yaml").write_text("task: llm\n")
    return folder


class FakeChild:
    """Stands in for a training process: alive until told otherwise."""

    pid = 4242

    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


# --- data loss ------------------------------------------------------------------------------------------


def test_a_run_is_never_started_into_a_folder_of_the_users_own_files(client, runs):
    mine = runs / "mine"
    (mine / "logs").mkdir(parents=True)
    (mine / "logs" / "app.json").write_text('{"my": "notes"}')
    (mine / "notes.txt").write_text("keep me")
    response = client.post("/api/runs", json={"yaml": config_for(mine)})
    assert response.status_code == 409, response.text
    assert "did not write" in response.json()["error"] and "logs/app.json" in response.json()["error"]
    assert (mine / "logs" / "app.json").read_text() == '{"my": "notes"}'
    assert not (runs / "mine.yml").exists()  # nothing written anywhere


def test_a_run_refused_before_training_can_be_started_again(client, runs, monkeypatch):
    from autotrain.app.runs import Runs

    monkeypatch.setattr(Runs, "_spawn", lambda self, name, config, *_: {"name": name, "config": config.name})
    again = runs / "again"
    (again / "logs").mkdir(parents=True)
    state = {"config": "again.yml", "command": ["-m", "autotrain.cli.main", "--config", "again.yml"]}
    (again / "logs" / "app.json").write_text(json.dumps(state))
    (again / "logs" / "app.log").write_text("error: data.path ...\n")
    (again / "logs" / "error.log").write_text("Traceback ...\n")
    response = client.post("/api/runs", json={"yaml": config_for(again)})
    assert response.status_code == 200, response.text


def test_a_runs_own_config_is_neither_listed_nor_overwritten(client, runs):
    run = finished_run(runs)
    (runs / "other.yml").write_text("task: llm\n")
    assert client.get("/api/configs").json() == ["other.yml"]
    put = client.put("/api/configs/done/autotrain.yaml", content="task: text-classification\n")
    assert put.status_code == 409 and "run's folder" in put.json()["error"]
    started = client.post("/api/runs", json={"yaml": config_for(runs / "new"), "save_as": "done/autotrain.yaml"})
    assert started.status_code == 409 and "run's folder" in started.json()["error"]
    assert (run / "autotrain.yaml").read_text() == "task: llm\n"
    assert not (runs / "new").exists()


# --- same origin ----------------------------------------------------------------------------------------


def test_a_runs_files_never_run_in_the_apps_origin(client, runs):
    run = finished_run(runs)
    (run / "plot.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>')
    (run / "notes.md").write_text("<script>alert(1)</script>")
    svg = client.get("/api/runs/done/files/plot.svg")
    assert svg.headers["content-disposition"] == "attachment"
    for response in (svg, client.get("/api/runs/done/files/notes.md")):
        assert response.status_code == 200
        assert "sandbox" in response.headers["content-security-policy"]
        assert "script-src" not in response.headers["content-security-policy"]  # default-src 'none' covers it
        assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("url", ["/", "/api/runs", "/static/js/main.js", "/api/runs/nope"])
def test_no_other_site_may_frame_the_app(client, url):
    response = client.get(url)
    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["referrer-policy"] == "no-referrer"


def test_the_token_moves_from_the_address_to_a_cookie_and_a_wrong_one_is_named(runs):
    finished_run(runs)
    (runs / "done" / "notes.md").write_text("hello")
    app = create_app(runs, REPO_ROOT, token="s3cret-token")
    client = TestClient(app, base_url="http://192.0.2.1:7860")
    missing, wrong = client.get("/api/runs"), client.get("/api/runs?token=nope")
    assert missing.status_code == 401 and "token is required" in missing.json()["error"]
    assert wrong.status_code == 403 and "wrong token" in wrong.json()["error"]
    assert "token is required" in client.get("/").text  # the page gets a line, not JSON
    page = client.get("/?token=s3cret-token")
    cookie = page.headers["set-cookie"]
    assert page.status_code == 200 and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert client.get("/api/runs/done/files/notes.md").text == "hello"  # a plain link: no token in it
    assert "token=" not in (REPO_ROOT / "autotrain/app/static/js/runs.js").read_text()


# --- concurrency ----------------------------------------------------------------------------------------


def test_simultaneous_starts_of_one_new_run_start_one_process(runs, monkeypatch):
    from autotrain.app.runs import Runs

    spawned = []

    def slow_spawn(self, name, config, resume, accept=False):  # a real start takes a moment: widen the window
        time.sleep(0.3)
        spawned.append(name)
        self.children[name] = FakeChild()
        return {"name": name, "pid": FakeChild.pid, "config": config.name, "resume": resume}

    monkeypatch.setattr(Runs, "_spawn", slow_spawn)
    app = create_app(runs, REPO_ROOT)
    text, answers = config_for(runs / "race"), []

    def start():
        answers.append(TestClient(app, base_url="http://127.0.0.1").post("/api/runs", json={"yaml": text}))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert spawned == ["race"]
    assert sorted(a.status_code for a in answers) == [200, 409, 409, 409]
    assert all("already running" in a.json()["error"] for a in answers if a.status_code == 409)


# --- memory ---------------------------------------------------------------------------------------------


def test_request_bodies_are_bounded_and_not_echoed(client):
    big = b"a: " + b"x" * (5 * 1024 * 1024)
    refused = client.post("/api/validate", content=big)
    assert refused.status_code == 413 and len(refused.content) < 500
    over_a_mib = b"task: llm\n#" + b"x" * (1024 * 1024)
    for response in (
        client.post("/api/validate", content=over_a_mib),
        client.put("/api/configs/big.yml", content=over_a_mib),
        client.post("/api/yaml/set", json={"text": over_a_mib.decode(), "path": ["task"], "value": "llm"}),
    ):
        assert response.status_code == 413 and "at most 1 MiB" in response.json()["error"]
        assert len(response.content) < 500

    def chunks():  # no Content-Length: counted as it streams in
        for _ in range(6):
            yield b"#" * (1024 * 1024)

    streamed = client.post("/api/validate", content=chunks())
    assert streamed.status_code == 413 and "at most 1 MiB" in streamed.json()["error"]


# --- odd requests: 4xx with a message, never 500 -------------------------------------------------------


@pytest.fixture
def odd(runs) -> TestClient:
    (runs / "afile.yml").write_text("task: llm\n")
    (runs / "adir.yml").mkdir()
    return TestClient(create_app(runs, REPO_ROOT), base_url="http://127.0.0.1", raise_server_exceptions=False)


DEEP = "a: " + "[" * 2000 + "]" * 2000 + "\n"
DEEP_VALUE: list = []
for _ in range(500):
    DEEP_VALUE = [DEEP_VALUE]
ODD = [
    ("POST", "/api/runs", {"yaml": "task: llm\n", "save_as": 5}, 400, "save_as must be"),
    ("POST", "/api/runs", {"yaml": "task: llm\n", "save_as": ["x.yml"]}, 400, "save_as must be"),
    ("PUT", "/api/configs/" + "n" * 300 + ".yml", "task: llm\n", 400, "characters long"),
    ("PUT", "/api/configs/afile.yml/x.yml", "task: llm\n", 409, "is a file"),
    ("PUT", "/api/configs/adir.yml", "task: llm\n", 409, "is a folder"),
    ("GET", "/api/configs/" + "n" * 300 + ".yml", None, 400, "characters long"),
    ("POST", "/api/yaml/set", {"text": DEEP, "path": ["a"], "value": 1}, 400, "nested too deeply"),
    ("POST", "/api/yaml/set", {"text": "a: 1\n", "path": ["a"] * 2000, "value": 1}, 400, "nested too deeply"),
    ("POST", "/api/yaml/set", {"text": "a: 1\n", "path": ["a"], "value": DEEP_VALUE}, 400, "nested too deeply"),
    ("PUT", "/api/configs/" + "a/" * 3000 + "x.yml", "task: llm\n", 400, "has 3001 parts"),
    ("GET", "/api/configs/" + "a/" * 3000 + "x.yml", None, 400, "has 3001 parts"),
    ("POST", "/api/yaml/set", {"text": 5, "path": ["a"], "value": 1}, 400, "text must be"),
    # libyaml's scanner stops it (PyYAML 6.0.1 on), or the composer's own depth limit (6.0's older libyaml)
    ("POST", "/api/validate", DEEP, 200, ("nesting depth", "nested more than 32 levels deep")),
    ("GET", "/api/runs/" + "n" * 300, None, 400, "not a run name"),
]


@pytest.mark.parametrize("method, url, body, status, message", ODD, ids=lambda v: str(v)[:30])
def test_odd_requests_get_a_4xx_with_a_message(odd, method, url, body, status, message):
    kwargs = {"json": body} if isinstance(body, dict) else {"content": body}
    response = odd.request(method, url, **kwargs)
    assert response.status_code == status, response.text[:500]
    answer = json.dumps(response.json())
    assert any(m in answer for m in ([message] if isinstance(message, str) else message)), answer[:500]
