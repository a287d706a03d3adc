"""The generation contract: the factory kept apart from it, the streaming protocol, weight versions."""

from __future__ import annotations

import ast
import inspect
from typing import Any

import pytest

import sparring.agents
from sparring.agents import factory, generation
from sparring.agents.generation import GenerationStream, Generator, StreamingGenerator
from sparring.agents.hf_backend import HFGenerator, HFStream
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


def test_http_generator_is_a_generator_without_a_stream() -> None:
    generator = _http_generator()
    assert isinstance(generator, Generator)
    assert not isinstance(generator, StreamingGenerator)


def test_http_weights_version_counts_updates_and_refuses_a_state_dict() -> None:
    generator = _http_generator()
    assert generator.weights_version == 0
    assert generator.update_weights() == 1 == generator.weights_version
    with pytest.raises(NotImplementedError, match="push them to the server yourself"):
        generator.update_weights({"lm_head.weight": 0})
    assert generator.weights_version == 1  # a refused update counts nothing


@pytest.mark.parametrize(
    ("protocol", "backend", "names"),
    [
        (StreamingGenerator, HFGenerator, ["stream", "generate", "update_weights"]),
        (GenerationStream, HFStream, ["add", "step"]),
    ],
)
def test_the_protocols_declare_the_hf_backend_signatures(protocol: Any, backend: Any, names: list[str]) -> None:
    """Parameters of each declared method are the HF backend's own (``stream`` returns its HFStream)."""
    for name in names:
        declared, actual = inspect.signature(getattr(protocol, name)), inspect.signature(getattr(backend, name))
        assert declared.parameters == actual.parameters, name
        if name != "stream":
            assert declared.return_annotation == actual.return_annotation, name
    assert inspect.signature(HFGenerator.stream).return_annotation == "HFStream"


@pytest.mark.model
def test_hf_generator_and_its_stream_satisfy_the_streaming_protocol(hf_generator: Any) -> None:
    assert isinstance(hf_generator, StreamingGenerator)
    stream = hf_generator.stream()
    assert isinstance(stream, GenerationStream) and stream.active == 0
    assert isinstance(hf_generator.weights_version, int)
