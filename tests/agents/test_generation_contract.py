"""The generation contract: the factory kept apart from it, the protocol's signatures, weight versions."""

from __future__ import annotations

import ast
import inspect
from typing import Any

import pytest

import sparring.agents
from sparring.agents import factory, generation
from sparring.agents.generation import Generator
from sparring.agents.hf_backend import HFGenerator
from sparring.agents.http_backend import HTTPGenerator


def test_the_contract_imports_no_backend_and_the_factory_is_public() -> None:
    """Backends import the contract; the contract must not import them back (nor the factory)."""
    tree = ast.parse(inspect.getsource(generation))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith("sparring.agents")}
    assert sparring.agents.make_generator is factory.make_generator
    assert not hasattr(generation, "make_generator")


def _http_generator() -> HTTPGenerator:
    """An HTTP generator that never connects (a model name and a tokenizer spare the requests)."""
    return HTTPGenerator("http://127.0.0.1:9/v1", "served-policy", tokenizer=object())


def test_http_generator_is_a_generator() -> None:
    assert isinstance(_http_generator(), Generator)


def test_http_weights_version_counts_updates_and_refuses_a_state_dict() -> None:
    generator = _http_generator()
    assert generator.weights_version == 0
    assert generator.update_weights() == 1 == generator.weights_version
    with pytest.raises(NotImplementedError, match="push them to the server yourself"):
        generator.update_weights({"lm_head.weight": 0})
    assert generator.weights_version == 1  # a refused update counts nothing


def test_the_protocol_declares_the_hf_backend_signatures() -> None:
    """Parameters and return of each declared method are the HF reference backend's own."""
    for name in ("generate", "update_weights"):
        declared, actual = inspect.signature(getattr(Generator, name)), inspect.signature(getattr(HFGenerator, name))
        assert declared.parameters == actual.parameters, name
        assert declared.return_annotation == actual.return_annotation, name


@pytest.mark.model
def test_hf_generator_satisfies_the_protocol(hf_generator: Any) -> None:
    assert isinstance(hf_generator, Generator)
    assert isinstance(hf_generator.weights_version, int)


def test_vllm_is_the_default_engine_and_its_absence_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training, the rollout bench and eval SPECs default to vLLM; without it the start says what to do.

    vLLM is installed where this suite runs under CI, so its absence is stood in for by the check the
    backend makes before importing it.
    """
    from sparring import SparringError
    from sparring.agents import vllm_backend
    from sparring.agents.bench import bench_rollout
    from sparring.agents.evaluation import parse_spec
    from sparring.training.config import TrainConfig

    assert TrainConfig().backend == "vllm" and factory.BACKENDS[0] == "vllm"
    assert inspect.signature(bench_rollout).parameters["backend"].default == "vllm"
    assert (parse_spec("default").kind, parse_spec("hf:default").kind) == ("default", "hf")
    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: False)
    with pytest.raises(SparringError, match=r"^vLLM, the rollout engine, is not installed: .* backend=hf \(training\)"):
        vllm_backend.VLLMGenerator()
