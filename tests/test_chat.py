"""The segment-wise chat encoding must equal the chat template, and its mask must select replies."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from minirl.chat import budget_text, encode_conversation, prompt_ids, turn_suffix_ids


@pytest.fixture(scope="module")
def tokenizer(quick_tiny_path: str):
    return AutoTokenizer.from_pretrained(quick_tiny_path)


SYSTEM = (
    "gridnav . move to the goal . walls block moves . reply with one word : up down left right ."
)
OBS = [
    "pos 1 4 goal 0 2 blocked up",
    "wall . pos 1 4 goal 0 2 blocked up",
    "pos 1 3 goal 0 2 blocked none",
]
REPLIES = ["up", "left", "up"]


def messages() -> list[dict]:
    out = [{"role": "system", "content": SYSTEM}]
    for obs, reply in zip(OBS, REPLIES, strict=True):
        out += [{"role": "user", "content": obs}, {"role": "assistant", "content": reply}]
    return out


def test_segments_equal_the_chat_template(tokenizer) -> None:
    enc = encode_conversation(tokenizer, SYSTEM, OBS, REPLIES)
    text = tokenizer.apply_chat_template(messages(), tokenize=False)
    # The template ends the last assistant message with "<|im_end|>\n"; a conversation stops at eos.
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert enc.input_ids == expected[: len(enc.input_ids)]
    assert expected[len(enc.input_ids) :] == tokenizer("\n", add_special_tokens=False)["input_ids"]


def test_mask_selects_exactly_the_replies(tokenizer) -> None:
    enc = encode_conversation(tokenizer, SYSTEM, OBS, REPLIES)
    for k, reply in enumerate(REPLIES):
        ids = [i for i, t in zip(enc.input_ids, enc.turn_index, strict=True) if t == k]
        assert ids[-1] == tokenizer.eos_token_id  # the model is taught to stop
        assert tokenizer.decode(ids, skip_special_tokens=True) == reply
    masked = [i for i, m in zip(enc.input_ids, enc.loss_mask, strict=True) if m]
    assert tokenizer.decode(masked, skip_special_tokens=True) == " ".join(REPLIES)
    unmasked = tokenizer.decode(
        [i for i, m in zip(enc.input_ids, enc.loss_mask, strict=True) if not m]
    )
    assert "goal" in unmasked and "assistant" in unmasked and "system" in unmasked
    assert sum(enc.loss_mask) == 2 * len(REPLIES)  # one word + eos per reply


def test_prompt_ends_with_generation_prompt(tokenizer) -> None:
    ids = prompt_ids(tokenizer, SYSTEM, OBS[0])
    assert tokenizer.decode(ids[-3:]) == "<|im_start|> assistant \n"
    suffix = turn_suffix_ids(tokenizer, "pos 0 0 goal 1 1 blocked none")
    text = tokenizer.decode(suffix)
    assert text.startswith("\n <|im_start|> user \n pos 0 0")
    assert text.endswith("<|im_start|> assistant \n")


def test_budget_text() -> None:
    assert budget_text("pos 1 1", 3) == "pos 1 1\nturns left: 3"
    assert budget_text("pos 1 1", None) == "pos 1 1"
