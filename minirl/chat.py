"""Chat messages to token ids, built segment by segment so masks are exact.

A multi-turn episode is one growing ChatML conversation:

    [system rules][user obs_1][assistant reply_1][user obs_2][assistant reply_2] ...

Training needs the token ids the policy actually *sampled*, so we never re-tokenize a decoded reply
(re-tokenization drift is a known silent bug, TRL #5144). Instead the conversation is stored as a
concatenation of segments:

    prompt_ids(system, obs_1)         template tokens up to and including "<|im_start|>assistant\\n"
    reply ids (sampled, ending in eos) the only tokens with loss_mask = 1
    turn_suffix_ids(obs_k)            the template between one reply's eos and the next reply

The segments come from the tokenizer's own chat template (rendered around a placeholder reply), so
the same code works for the tiny word-level tokenizer and for Qwen/SmolLM-style BPE tokenizers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase

if TYPE_CHECKING:  # for the annotation only: the tasks do not need this module
    import tasks

_PLACEHOLDER = "minirlplaceholder"


def budget_text(observation: str, turns_left: int | None, natural: bool = False) -> str:
    """The user message for one turn: the observation, plus the remaining budget when visible."""
    if turns_left is None:
        return observation
    if natural:
        return f"{observation}\nYou have {turns_left} turn{'s' if turns_left != 1 else ''} left."
    return f"{observation}\nturns left: {turns_left}"


def word_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """True for a word-level tokenizer: the embedded `tiny`'s, never a pretrained chat model's."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and type(backend.model).__name__ == "WordLevel"


def resolve_task_text(choice: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """`--task_text auto` made concrete: 'compact' for a word-level tokenizer, else 'natural'.

    A word-level tokenizer (the embedded `tiny`'s) knows only the words it was built from, which
    are the compact text's; any sentence would reach it as unknown words. Every other tokenizer
    (BPE, SentencePiece: any pretrained chat model's) reads plain sentences.
    """
    if choice != "auto":
        return choice
    return "compact" if word_level(tokenizer) else "natural"


def _render(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict], generation_prompt: bool
) -> str:
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )
    assert isinstance(text, str)
    return text


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_texts(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    """Token ids of several texts in one call (the tokenizer's batch path: one call per turn)."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def eos_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that ends an assistant reply (ChatML's <|im_end|> for chat tokenizers)."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token; a chat model needs one to end replies")
    return int(tokenizer.eos_token_id)


def prompt_text(tokenizer: PreTrainedTokenizerBase, system: str, observation: str) -> str:
    """The system message and first observation, ending with the generation prompt."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": observation}]
    return _render(tokenizer, messages, generation_prompt=True)


def prompt_ids(
    tokenizer: PreTrainedTokenizerBase, system: str, observation: str, reply_prefix: str = ""
) -> list[int]:
    """Token ids of the system message and first observation, ending with the generation prompt.

    `reply_prefix` is written after the generation prompt, as the start of the assistant's reply
    (the natural text's "Action:"): the model continues it, and it is never trained on.
    """
    return _encode(tokenizer, prompt_text(tokenizer, system, observation) + reply_prefix)


def _suffix_by_template(tokenizer: PreTrainedTokenizerBase, observation: str) -> str:
    """The template's text after "<placeholder><eos>" in a two-turn conversation."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": _PLACEHOLDER},
        {"role": "user", "content": observation},
    ]
    text = _render(tokenizer, messages, generation_prompt=True)
    marker = _PLACEHOLDER + tokenizer.decode([eos_id(tokenizer)])
    cut = text.find(marker)
    if cut < 0:
        raise ValueError(
            "the chat template does not end assistant messages with the eos token; "
            "minirl needs a ChatML-style template (e.g. Qwen, SmolLM2, or the tiny model's)"
        )
    return text[cut + len(marker) :]


# Per tokenizer (by id, with the tokenizer kept alive beside it): the turn suffix's text before
# and after the observation, or None when the template does not render the observation verbatim.
_SUFFIX_FRAMES: dict[int, tuple[PreTrainedTokenizerBase, tuple[str, str] | None]] = {}


def _suffix_frame(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str] | None:
    """Render the template once around a marker, and check the split on a real observation.

    Rendering the Jinja chat template costs about a millisecond, once per episode and turn; the
    observation is all that changes, so the text around it is rendered once per tokenizer. A
    template that changes the content (strips or rewrites it) fails the check and keeps the
    full rendering every turn.
    """
    cached = _SUFFIX_FRAMES.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    marker = "minirlobservation"
    before, found, after = _suffix_by_template(tokenizer, marker).partition(marker)
    frame = (before, after) if found and marker not in after else None
    probe = "pos 1 2\nturns left: 3 . Higher: the number is between 4 and 9."
    if frame is not None and before + probe + after != _suffix_by_template(tokenizer, probe):
        frame = None
    _SUFFIX_FRAMES[id(tokenizer)] = (tokenizer, frame)
    return frame


def turn_suffix_text(
    tokenizer: PreTrainedTokenizerBase, observation: str, reply_prefix: str = ""
) -> str:
    """The template text that follows a reply's eos: close it, a user turn, the assistant again.

    Taken from the chat template itself (ChatML: "\\n<|im_start|>user\\n...<|im_end|>\\n
    <|im_start|>assistant\\n") rather than hard-coded here, then `reply_prefix`.
    """
    frame = _suffix_frame(tokenizer)
    if frame is None:
        return _suffix_by_template(tokenizer, observation) + reply_prefix
    return frame[0] + observation + frame[1] + reply_prefix


def turn_suffix_ids(
    tokenizer: PreTrainedTokenizerBase, observation: str, reply_prefix: str = ""
) -> list[int]:
    """Token ids of `turn_suffix_text`: the template tokens between one reply and the next."""
    return _encode(tokenizer, turn_suffix_text(tokenizer, observation, reply_prefix))


def reply_ids(tokenizer: PreTrainedTokenizerBase, reply: str) -> list[int]:
    """Ids of a *written* reply (demonstrations only) followed by eos; rollouts use sampled ids."""
    return _encode(tokenizer, reply) + [eos_id(tokenizer)]


def reply_text(env: tasks.Env, action: str) -> str:
    """What the model writes for `action` after the reply prefix: " 8" after "Action:", or "8".

    The probes (minirl.tools) and the study's same-position scores (minirl.eval.position) score
    each action's reply as `action_replies` writes it.
    """
    return f" {action}" if env.natural else action


def action_replies(tokenizer: PreTrainedTokenizerBase, env: tasks.Env) -> list[list[int]]:
    """The written reply of every action the task allows, in `env.action_words`' order."""
    return [reply_ids(tokenizer, reply_text(env, w)) for w in env.action_words]


@dataclass
class Encoded:
    """A tokenized conversation: ids, a 0/1 mask on assistant tokens, and each token's turn."""

    input_ids: list[int]
    loss_mask: list[int]
    turn_index: list[int]  # turn number of each assistant token, -1 on template/observation tokens


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase, system: str, observations: list[str], replies: list[str]
) -> Encoded:
    """Tokenize a written conversation with the same segments a rollout produces.

    observations[k] precedes replies[k]; a trailing observation after the last reply is dropped
    (nothing is trained on it). Used for the warm start and to check masks in tests.
    """
    if not observations or len(replies) > len(observations):
        raise ValueError("need one observation before every reply")
    ids = prompt_ids(tokenizer, system, observations[0])
    mask = [0] * len(ids)
    turns = [-1] * len(ids)
    for k, reply in enumerate(replies):
        if k > 0:
            suffix = turn_suffix_ids(tokenizer, observations[k])
            ids += suffix
            mask += [0] * len(suffix)
            turns += [-1] * len(suffix)
        r = reply_ids(tokenizer, reply)
        ids += r
        mask += [1] * len(r)
        turns += [k] * len(r)
    return Encoded(ids, mask, turns)
