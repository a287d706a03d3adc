"""Every example of docs/integrations.md runs as written: the tests read the code blocks from the page.

A block is run verbatim except where the page names something a test machine must replace, each
replacement checked to be there (so a changed example fails here instead of running something
else): the ports (other sessions may hold 8000), ``--limit 50`` of a CPU model's evaluation, and
TRL's model (a tiny random Llama with SmolLM2's tokenizer, trained one step on the CPU with a
short completion budget). Shell blocks run one command per line, ``sparring`` as this
interpreter's ``-m sparring.cli``, a line ending in ``&`` as a server that the next lines talk to.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparring import ServerUnavailable
from sparring.agents.evaluation.specs import parse_spec
from tests.conftest import cpu_grpo_config, cpu_grpo_settings, default_corpus_built, require
from tests.training.conftest import smol_tokenizer, tiny_model_dir  # noqa: F401 (fixtures of the TRL test)

PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"
TRL = "TRL GRPOTrainer"
SERVERS = "OpenAI-compatible servers (vllm serve) for evaluation"
RETRIEVER = "The Search-R1 retriever"
SERVER_START_S = 240  # serve-policy loads SmolLM2 before it binds; on a loaded 2-core machine, minutes


def section_blocks(heading: str) -> list[tuple[str, str]]:
    """The fenced code blocks (language, code) of the page's ``## heading`` section, in order."""
    sections = re.split(r"^## ", PAGE.read_text(), flags=re.M)
    body = next((s for s in sections if s.startswith(heading + "\n")), None)
    assert body is not None, f"docs/integrations.md has no section '## {heading}'"
    return re.findall(r"^```(\w+)\n(.*?)^```$", body, flags=re.M | re.S)


def blocks(heading: str, language: str) -> list[str]:
    found = [code for lang, code in section_blocks(heading) if lang == language]
    assert found, f"the section '{heading}' has no {language} example"
    return found


def replaced(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each key replaced, failing when the page no longer holds a key."""
    for old, new in replacements.items():
        assert old in text, f"the example no longer holds {old!r}; update the test's replacements"
        text = text.replace(old, new)
    return text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_port(text: str, page_port: int, port: int) -> str:
    """``text`` with the page's ``--port P`` and ``127.0.0.1:P`` moved to ``port``, failing when it holds neither."""
    text, count = re.subn(rf"(--port |127\.0\.0\.1:){page_port}\b", rf"\g<1>{port}", text)
    assert count, f"the example no longer names port {page_port}; update the test"
    return text


def _argv(line: str) -> list[str]:
    argv = shlex.split(line)
    return [sys.executable, "-m", "sparring.cli", *argv[1:]] if argv[0] == "sparring" else argv


def _wait_for_port(proc: subprocess.Popen[bytes], argv: list[str]) -> None:
    port = int(argv[argv.index("--port") + 1])
    deadline = time.monotonic() + SERVER_START_S
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = proc.communicate()[0].decode(errors="replace")
            pytest.fail(f"{' '.join(argv[:4])} did not come up on port {port}: {out[-2000:]}")
        time.sleep(0.5)


@contextlib.contextmanager
def shell(cwd: Path) -> Iterator[Any]:
    """A runner of shell blocks in ``cwd``; the servers it started are stopped when the block ends."""
    servers: list[subprocess.Popen[bytes]] = []

    def run(code: str) -> list[subprocess.CompletedProcess[str]]:
        done = []
        for line in filter(None, (raw.strip() for raw in code.splitlines())):
            background = line.endswith("&")
            argv = _argv(line.removesuffix("&"))
            if background:
                proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                servers.append(proc)
                _wait_for_port(proc, argv)
                continue
            result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=540)
            assert result.returncode == 0, f"`{line}` failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            done.append(result)
        return done

    try:
        yield run
    finally:
        for proc in servers:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_python(code: str) -> tuple[dict[str, Any], str]:
    """Execute a Python example in a fresh namespace; returns the namespace and what it printed."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace, printed.getvalue()


def test_the_page_holds_the_sections_the_tests_run():
    headings = re.findall(r"^## (.+)$", PAGE.read_text(), flags=re.M)
    assert {TRL, SERVERS, RETRIEVER} <= set(headings)


def test_every_openai_spec_on_the_page_parses():
    commands = "".join(blocks(SERVERS, "bash"))
    specs = re.findall(r"--model \"?(openai:[^\s\"]+)", commands)
    assert len(specs) >= 2  # sparring serve-policy's and vllm serve's
    for text in specs:
        spec = parse_spec(text)
        assert spec.kind == "openai" and spec.target.endswith("/v1"), text
    assert parse_spec(specs[1]).model == "Qwen/Qwen2.5-7B-Instruct"  # #MODEL names vllm serve's model


@pytest.mark.slow
def test_the_retriever_examples_run_against_serve_retriever(tmp_path: Path):
    require(default_corpus_built(), "the default corpus")
    port = free_port()
    examples = [(lang, with_port(code, 8000, port)) for lang, code in section_blocks(RETRIEVER)]
    assert [lang for lang, _ in examples] == ["bash", "python", "python", "bash"]
    with shell(tmp_path) as run:
        (curl,) = run(examples[0][1])  # the server starts, curl asks it
        result = json.loads(curl.stdout)["result"]
        assert len(result) == 2 and all(len(row) == 3 for row in result)
        assert result[0][0]["document"]["id"] == "foldoc:daemon" and result[0][0]["score"] > 0
        assert {"id", "contents", "index"} <= set(result[1][0]["document"])

        _, printed = run_python(examples[1][1])  # Search-R1's call, from Python
        lines = printed.splitlines()
        assert len(lines) == 2 and lines[0].split(" | ")[0].endswith(" Jargon File")

        env_run, _ = run_python(examples[2][1])  # an env searching through the server
        assert env_run["obs"].startswith("<information>Doc 1 (Title: ")
        assert env_run["env"].unwrapped.queries == ["Fe element symbol"]

        run(examples[3][1])  # sparring eval searching through the server
        report = json.loads((tmp_path / "evals" / "floor-remote" / "report.json").read_text())
        assert report["summary"]["instances"] == 5 and report["summary"]["errors"] == 0
        assert report["summary"]["searches"]["mean"] == 1.0  # the floor searches once per question, remotely

    # The server is gone: the env example now fails naming it, so it searched there, not in-process.
    with pytest.raises(ServerUnavailable, match=rf"retrieval server at http://127.0.0.1:{port}/retrieve"):
        run_python(examples[2][1])


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(900)
def test_the_openai_server_example_evaluates_through_serve_policy(tmp_path: Path):
    from sparring.agents.model import default_model_present

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    require(default_corpus_built(), "the default corpus")
    served = blocks(SERVERS, "bash")[0]
    code = replaced(with_port(served, 8001, free_port()), {"--limit 50": "--limit 2"})
    with shell(tmp_path) as run:
        run(code)
    report = json.loads((tmp_path / "evals" / "smollm2-http" / "report.json").read_text())
    assert report["model"].startswith("openai:http://127.0.0.1:")
    assert report["summary"]["instances"] == 2 and report["summary"]["errors"] == 0
    assert report["summary"]["tokens"]["mean"] > 0  # the model generated through the server


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(900)
def test_the_trl_example_trains_one_step(
    tmp_path: Path,
    tiny_model_dir: Path,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
):
    require(default_corpus_built(), "the default corpus")
    torch = pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    import sparring.envs.trl as sparring_trl

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model_line = 'model_id = "HuggingFaceTB/SmolLM2-135M-Instruct"'
    code = replaced(blocks(TRL, "python")[0], {model_line: f"model_id = {str(tiny_model_dir)!r}"})

    # The page's GRPOConfig, made a CPU smoke run: one step, 16 tokens per completion.
    real_config = trl.GRPOConfig
    page_config: dict[str, Any] = {}

    def cpu_config(**kwargs: Any) -> Any:
        page_config.update(kwargs)
        fast = cpu_grpo_settings(tmp_path) | {"max_completion_length": 16, "shuffle_dataset": False}
        return real_config(**(kwargs | fast))

    monkeypatch.setattr(trl, "GRPOConfig", cpu_config)
    # The envs the page's factory makes, to see which question each rollout was reset on.
    made: list[Any] = []
    real_factory = sparring_trl.trl_environment_factory

    def recording_factory(*args: Any, **kwargs: Any) -> Any:
        make = real_factory(*args, **kwargs)
        return lambda: made.append(make()) or made[-1]

    monkeypatch.setattr(sparring_trl, "trl_environment_factory", recording_factory)

    namespace, _ = run_python(code)

    trainer = namespace["trainer"]
    assert page_config["max_tool_calling_iterations"] == namespace["max_turns"]  # see the next test
    assert sorted(tool.__name__ for tool in trainer.tools) == ["answer", "search"]
    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    assert "rewards/TRLSearchAnswerEnv/mean" in logged and "rewards/brevity/mean" in logged
    tasks = [env._env.task for env in made if env._env.task]
    # Row 1's task, then row 2's question drawn with its seed, each shared by the row's 2 rollouts.
    assert [t["question"] for t in tasks[:2]] == ["Which element has the symbol Fe?"] * 2
    assert tasks[2]["id"].startswith("answer:") and tasks[2] == tasks[3]


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("iterations", "reward"), [(0, 1.0), (-1, 0.0)], ids=["max_turns", "max_turns-1"])
def test_max_tool_calling_iterations_of_max_turns_plays_every_turn(
    tmp_path: Path,
    smol_tokenizer: Any,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
    iterations: int,
    reward: float,
):
    """The page's ``max_tool_calling_iterations=max_turns``: TRL runs the calls of that many completions
    after the first and drops the calls of the one after, so a policy that searches on every turn but
    the last and answers on the last is graded only with ``max_turns`` (with ``max_turns - 1`` its answer
    is never played). The policy is scripted: a random model calls no tools."""
    require(default_corpus_built(), "the default corpus")
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    import copy

    from sparring.envs.trl import chatml_tool_template, trl_environment_factory
    from tests.training.conftest import tiny_model

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.chat_template = chatml_tool_template()
    tokenizer.padding_side = "left"
    max_turns = 3

    def call(name: str, argument: str, value: str) -> list[int]:
        text = f'<tool_call>\n{{"name": "{name}", "arguments": {{"{argument}": "{value}"}}}}\n</tool_call><|im_end|>'
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def scripted_turn(prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> tuple[list[list[int]], None]:
        """Search on turns 1..max_turns-1, answer on turn max_turns, then close without a call."""
        out = []
        for ids in prompt_ids:
            played = tokenizer.decode(ids).count("<tool_response>")
            if played < max_turns - 1:
                out.append(call("search", "query", "Fe element symbol"))
            elif played == max_turns - 1:
                out.append(call("answer", "answer", "iron"))
            else:
                out.append(tokenizer("Done.<|im_end|>", add_special_tokens=False)["input_ids"])
        return out, None

    system = {"role": "system", "content": "Call search to look things up, then call answer."}
    task = {"id": "fe", "question": "Which element has the symbol Fe?", "answers": ["iron"]}
    args = cpu_grpo_config(
        tmp_path,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=1024,
        max_tool_calling_iterations=max_turns + iterations,
    )
    trainer = trl.GRPOTrainer(
        model=tiny_model(tokenizer),
        args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": [system, {"role": "user", "content": ""}], "task": task}]),
        processing_class=tokenizer,
        environment_factory=trl_environment_factory("sparring/SearchAnswer-v0", max_turns=max_turns, doc_chars=80),
    )
    monkeypatch.setattr(trainer, "_generate_single_turn", scripted_turn)
    trainer.train()
    assert trainer.state.log_history[0]["rewards/TRLSearchAnswerEnv/mean"] == reward
