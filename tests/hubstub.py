"""A hub model without a hub: a stubbed download cache, and a small random Qwen2 repository.

Shared by the tests of minirl.models (a hub id loads in 4-bit) and minirl.tools.gpu_memory (the
README estimates for Qwen2.5-0.5B).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

HUB_ID = "Qwen/Qwen2.5-0.5B-Instruct"


QWEN_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}


QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def stub_hub_download(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hub cache holding HUB_ID as a finished download would leave it, and offline mode on.

    transformers then resolves the hub id from this cache exactly as it would after a real
    download; the returned snapshot directory is where the test puts the repository's files.
    """
    import huggingface_hub.constants

    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    revision = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return snapshot


def small_qwen_repo(snapshot: Path) -> None:
    """A Qwen2 model and a byte-level BPE tokenizer of Qwen's class and template, small and
    randomly initialised: the real files are 1 GB and no hub is reachable here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    import tasks

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = []
    for name in tasks.NAMES:
        env = tasks.make(name)
        corpus += [env.system_prompt, env.reset(0), *env.action_words]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus * 10, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=QWEN_TEMPLATE,
    )
    tokenizer.save_pretrained(snapshot)
    meta = json.loads((snapshot / "tokenizer_config.json").read_text())
    (snapshot / "tokenizer_config.json").write_text(
        json.dumps({**meta, "tokenizer_class": "Qwen2Tokenizer"})
    )
    config = Qwen2Config(
        hidden_size=128,  # widths are multiples of 64 for the CPU NF4 kernels
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(snapshot)
