"""Token bookkeeping of a multi-turn episode: the chat template, applied once and then by deltas.

An episode's token buffer is built so that the trainer sees exactly what the policy saw and did:

1. the prompt is chat-templated once (with the env's tools where the template renders tools; else
   a system message describes them) and ends with the template's generation prompt;
2. each turn appends the generated ids exactly as sampled (action tokens);
3. then the observation's ids: whatever closes the assistant message (if the model did not sample
   the end-of-turn token itself, or the template puts more after it), followed by the template's
   delta for one new message and the next generation prompt.

The delta is taken from a fixed stand-in conversation: the template is rendered with and without
one more message and the suffix is tokenised. Past turns are never re-tokenised, so nothing the
model sampled is ever replaced by a different tokenisation of the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparring.envs.core import Episode
from sparring.envs.tools import example_call

__all__ = ["ChatFormat", "append_tokens", "stop_strings", "token_roles", "tool_instructions"]

_PLACEHOLDER_USER = "Hello."
_PLACEHOLDER_REPLY = "Hi."


def tool_instructions(tools: Sequence[dict[str, Any]]) -> str:
    """A system message that teaches the tools to a model whose chat template cannot render them.

    Every example is a real call (the tools' own examples), never a placeholder such as ``...``,
    which a small model copies as it is.
    """
    lines = [
        "You solve the task by calling tools. Call exactly one tool per message, either as JSON inside",
        "<tool_call> and </tool_call> or, for a tool with one argument, between the tool's own tags. Tools:",
    ]
    for schema in tools:
        fn = schema.get("function", schema)
        params = fn.get("parameters", {}).get("properties", {})
        args = ", ".join(f"{name}: {spec.get('type', 'string')}" for name, spec in params.items())
        lines.append(f"- {fn['name']}({args}): {fn.get('description', '')}")
        example = example_call(schema)
        if example:
            lines.append(f"  example: {example}")
    return "\n".join(lines)


def stop_strings(tools: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """Strings that end a turn: the close of a JSON tool call and of every shorthand tool tag."""
    names = [schema.get("function", schema)["name"] for schema in tools]
    return ("</tool_call>", *(f"</{name}>" for name in names))


class ChatFormat:
    """The chat template of a tokenizer, used as a prompt once and as deltas afterwards.

    Args:
        tokenizer: An HF tokenizer with a chat template.
        system_prompt: Extra system text put before the tool instructions (None: none).
        observation_role: Role of observation messages (None: ``"tool"`` where the template renders
            tools, else ``"user"``, the role a small chat model has seen).
    """

    def __init__(self, tokenizer: Any, *, system_prompt: str | None = None, observation_role: str | None = None):
        """Probe the template once (tool support, the close of an assistant message)."""
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        probe_tool = [{"type": "function", "function": {"name": "probe", "description": "d", "parameters": {}}}]
        user = [{"role": "user", "content": _PLACEHOLDER_USER}]
        self.supports_tools = self.render(user, tools=probe_tool) != self.render(user)
        self.observation_role = observation_role or ("tool" if self.supports_tools else "user")
        opened = self.render(user, add_generation_prompt=True)
        closed = self.render(user + [{"role": "assistant", "content": _PLACEHOLDER_REPLY}])
        if not closed.startswith(opened + _PLACEHOLDER_REPLY):
            raise ValueError("the chat template does not render an assistant message after its generation prompt")
        #: What the template puts after an assistant message's content (e.g. "<|im_end|>\n").
        self.assistant_close = closed[len(opened) + len(_PLACEHOLDER_REPLY) :]
        self._closed_probe = user + [{"role": "assistant", "content": _PLACEHOLDER_REPLY}]
        self._closed_text = closed

    def render(self, messages: list[dict[str, Any]], *, tools: Any = None, add_generation_prompt: bool = False) -> str:
        """The template's text for ``messages``."""
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (its special tokens are already written out)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_messages(self, observation: str, tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The opening messages: a system message where needed, then the env's first observation."""
        system_parts = [self.system_prompt] if self.system_prompt else []
        if tools and not self.supports_tools:
            system_parts.append(tool_instructions(tools))
        messages = [{"role": "system", "content": "\n\n".join(system_parts)}] if system_parts else []
        return messages + [{"role": "user", "content": observation}]

    def prompt_text(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> str:
        """The prompt's text, ending with the generation prompt."""
        return self.render(
            messages, tools=list(tools) if tools and self.supports_tools else None, add_generation_prompt=True
        )

    def observation_text(self, observation: str, *, action_closed_by: str | None) -> str:
        """Text appended after an action: the rest of the assistant close, the new message, the next prompt.

        Args:
            observation: The env's observation.
            action_closed_by: The decoded end-of-turn token the model sampled last (e.g. "<|im_end|>"), or
                None if the action ended otherwise (stop string, length).
        """
        close = self.assistant_close
        if action_closed_by and close.startswith(action_closed_by):
            close = close[len(action_closed_by) :]
        message = {"role": self.observation_role, "content": observation}
        full = self.render(self._closed_probe + [message], add_generation_prompt=True)
        if not full.startswith(self._closed_text):
            raise ValueError("the chat template re-renders earlier messages when one is added; deltas are undefined")
        return close + full[len(self._closed_text) :]


def append_tokens(
    episode: Episode, ids: Sequence[int], turn: int, *, action: bool, logprobs: Sequence[float] | None = None
) -> None:
    """Append ids to an episode's buffer with their turn index, action mask and behaviour logprobs."""
    if logprobs is not None and len(logprobs) != len(ids):
        raise ValueError("one logprob per token is needed")
    episode.token_ids.extend(int(i) for i in ids)
    episode.token_turn.extend([turn] * len(ids))
    episode.action_mask.extend([action] * len(ids))
    episode.logprobs.extend([float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids))


def token_roles(episode: Episode) -> list[str]:
    """Role of each token of the buffer: ``"prompt"``, ``"action"`` or ``"observation"``."""
    return [
        "prompt" if turn < 0 else ("action" if is_action else "observation")
        for turn, is_action in zip(episode.token_turn, episode.action_mask, strict=True)
    ]
