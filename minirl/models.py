"""Load the policy: a base causal LM, quantized to 4-bit NF4, with trainable LoRA adapters.

The recipe is QLoRA's, at any scale:

    base  = from_pretrained(name, quantization_config=BitsAndBytesConfig(load_in_4bit, "nf4"))
    base  = prepare_model_for_kbit_training(base)        # fp32 norms, input grads for the adapters
    model = get_peft_model(base, LoraConfig(r, alpha, target_modules="all-linear"))

Only the LoRA matrices are trained. The reference policy for the KL term is the *same* model
with its adapters switched off (`model.disable_adapter()`), so no second copy is held.

`name` is `tiny` (the embedded base for the task, from minirl.tiny, built on first use;
`tiny-sticky` and `tiny-truncated` are its variants with a recovery deficit), `smollm2` (a real
135M chat model converted once from a GGUF file, minirl.infra.smollm2), a local checkpoint
directory, or a hub id `owner/name` such as `Qwen/Qwen2.5-0.5B-Instruct` (needs internet once and,
in practice, a GPU; minirl.tools.gpu_memory estimates what a run needs). A hub id is the only name
that reaches the network; a name that is none of these is refused at once.
`quant="none"` skips quantization; the rest of the path is identical.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BitsAndBytesConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minirl.chat import word_level
from minirl.infra.errors import CheckpointError, ModelLoadError
from minirl.infra.progress import without_library_bars
from minirl.infra.validation import MODEL_CHOICES, TINY_MODELS, check_model

if TYPE_CHECKING:  # minirl.tiny (it imports every task) loads only where a tiny base is asked for
    from minirl.tiny import TinyRecipe

QUANT_CHOICES = ("nf4", "none")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_model_path(name: str, task: str = "gridnav") -> str:
    """Map `tiny` to the cached tiny base for `task` (built if needed); pass other names through.

    Any other name must be a model directory or a hub id (minirl.infra.validation.check_model).
    """
    if name in TINY_MODELS:  # tiny, or tiny-<demonstrator> (a base with a recovery deficit)
        from minirl.tiny import ensure_tiny

        return str(ensure_tiny(tiny_recipe(name, task)).path)
    if name == "smollm2":
        from minirl.infra.smollm2 import ensure_smollm2

        return str(ensure_smollm2().path)
    check_model(name)
    path = Path(name).expanduser()
    return str(path) if path.is_dir() else name


def base_identity(name: str, task: str = "gridnav") -> str:
    """What `name` loads for `task`, in words a run records (summary.json's base_model): a tiny
    base by its recipe's cache key (`tiny-sticky` on fog is not the same model after its recipe
    changes, though the flag reads the same), any other model by its name. Builds nothing."""
    if name in TINY_MODELS:
        return f"{name} (tiny-{tiny_recipe(name, task).key()})"
    return name


def tiny_recipe(name: str, task: str) -> TinyRecipe:
    """The recipe of a tiny base: `tiny` is warm-started on uniform-noise demonstrations,
    `tiny-<demonstrator>` on that demonstrator's (minirl.tiny)."""
    from minirl.tiny import TinyRecipe

    return TinyRecipe.for_task(task, name.partition("-")[2] or "uniform")


def ensure_base(name: str, task: str = "gridnav", progress: bool = True) -> bool:
    """Build the base `name` loads for `task` unless the cache has it; True when built now.

    Only the bases minirl makes (a tiny one, smollm2's conversion) are built; any other name is
    loaded as it is, later. The study calls this once per task before the runs that share it:
    left to the runs, the first would build it while the others wait on its lock.
    """
    if name in TINY_MODELS:
        from minirl.tiny import ensure_tiny

        return ensure_tiny(tiny_recipe(name, task), progress=progress).built
    if name == "smollm2":
        from minirl.infra.smollm2 import ensure_smollm2

        return ensure_smollm2().converted
    return False


def hub_error(name: str, err: Exception) -> ModelLoadError:
    """A one-line ModelLoadError for a model that transformers could not load."""
    from huggingface_hub import constants

    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    if Path(name).expanduser().is_dir():
        return ModelLoadError(f"--model {name!r} could not be loaded ({first})")
    if constants.HF_HUB_OFFLINE:
        return ModelLoadError(
            f"--model {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
            f"download it once with internet access, or use {MODEL_CHOICES}"
        )
    return ModelLoadError(
        f"--model {name!r} could not be loaded ({first}); without internet access, set "
        "HF_HUB_OFFLINE=1 to use the local Hugging Face cache without asking the hub"
    )


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """Hide huggingface_hub's warning per retry (ten lines when the hub is unreachable): the
    one-line error that follows says what happened."""
    hub = logging.getLogger("huggingface_hub")
    level = hub.level
    hub.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub.setLevel(level)


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    try:
        with quiet_hub():
            tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        # Not reachable, not downloaded, or a directory whose files are not a tokenizer's.
        raise hub_error(path, err) from err
    if tokenizer.chat_template is None:
        raise ModelLoadError(f"--model {path!r}: the tokenizer has no chat template")
    if tokenizer.pad_token_id is None:
        # Many chat tokenizers ship without a pad token; eos works because minirl builds attention
        # masks from lengths, never from `ids != pad` (see minirl.rollout).
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


DTYPE_CHOICES = ("auto", "bfloat16", "float32")


def cpu_has_fast_bf16() -> bool:
    """True when this CPU multiplies bf16 natively (AVX512-BF16 or AMX): 4-5x fp32's matmul rate
    here, measured on an AVX512-BF16 EPYC. torch exposes the check only privately, hence getattr."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, check, lambda: False)()) for check in checks)


def resolve_dtype(choice: str, device: torch.device, chat_model: bool) -> torch.dtype:
    """`--dtype auto` made concrete: the dtype the base model's matmuls run in.

    bf16 on a GPU (QLoRA's choice). On a CPU, bf16 for a pretrained chat model when the CPU has
    native bf16 matmuls: its step is matmul-bound, and bf16 runs them 4-5x faster; float32
    otherwise, and always for `tiny`, whose step is bound by per-call overhead, where bf16
    measured no faster and only loosened the match of sampling and training log-probs.
    """
    if choice not in DTYPE_CHOICES:
        raise ModelLoadError(f"--dtype {choice!r}: valid choices are {', '.join(DTYPE_CHOICES)}")
    if choice != "auto":
        return getattr(torch, choice)
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if chat_model and cpu_has_fast_bf16() else torch.float32


def load_kwargs(quant: str, device: torch.device, dtype: torch.dtype | None = None) -> dict:
    """The `from_pretrained` arguments for a base in `quant` on `device`, computing in `dtype`
    (default: bf16 on a GPU, float32 on a CPU).

    NF4 keeps its weights in 4 bits and `dtype` is the dtype of its matmuls (the other weights
    stay float32, prepare_model_for_kbit_training's choice); `quant="none"` loads the weights
    themselves in `dtype`.
    """
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if quant == "none":
        return {"dtype": dtype}
    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=dtype,
    )
    return {"quantization_config": config, "device_map": {"": device}}


def load_base(
    path: str,
    quant: str = "nf4",
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> PreTrainedModel:
    """The frozen base model, 4-bit NF4 (default) or full precision, computing in `dtype`."""
    if quant not in QUANT_CHOICES:
        raise ModelLoadError(f"--quant {quant!r}: valid choices are {', '.join(QUANT_CHOICES)}")
    device = device or default_device()
    try:
        with quiet_hub(), without_library_bars():
            model = AutoModelForCausalLM.from_pretrained(path, **load_kwargs(quant, device, dtype))
    except (OSError, ValueError, KeyError) as err:  # unreachable, or not a causal LM's files
        raise hub_error(path, err) from err
    if quant == "none":
        model.to(device)
    else:
        keep_4bit_weights_differentiable(model)
    return model


def keep_4bit_weights_differentiable(model: torch.nn.Module) -> None:
    """Stop bitsandbytes from repacking NF4 weights for its CPU inference kernel.

    On CPUs with AVX512-BF16, `Linear4bit` repacks its weights in place the first time it runs
    in eval mode without gradients (our rollouts). The packed kernel has no autograd formula, so
    every later training forward silently drops the gradient through the frozen base weights, and
    LoRA adapters below the top layer learn from a wrong gradient (PyTorch only warns
    "autograd kernel was not registered"). tests/test_models.py checks the gradients against a
    full-precision twin.
    """
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


def lora_config(r: int = 16, alpha: int = 32, dropout: float = 0.0) -> LoraConfig:
    """LoRA on every linear layer of the transformer blocks (QLoRA's choice; lm_head excluded)."""
    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


def load_policy(
    name: str = "tiny",
    quant: str = "nf4",
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.0,
    adapter: str | Path | None = None,
    device: torch.device | None = None,
    task: str = "gridnav",
    gradient_checkpointing: bool | None = False,
    dtype: str = "auto",
) -> tuple[PeftModel, PreTrainedTokenizerBase]:
    """Base (+4-bit) + LoRA, ready to train. `adapter` loads a saved peft adapter directory.

    `task` only matters for `tiny`, whose base is warm-started on the task it will play.
    `gradient_checkpointing` keeps only each decoder layer's input for the backward and recomputes
    the rest there: about a third more compute for the training forward, and activations that
    shrink from ~14 vectors per token and layer to 1 (see minirl.tools.gpu_memory). It acts only
    in train mode, so generation (eval mode) keeps its KV cache. None (train.py's default) turns it
    on for a pretrained chat model and off for the word-level `tiny`. `dtype` is the matmuls'
    (`resolve_dtype`).
    """
    path = resolve_model_path(name, task)
    tokenizer = load_tokenizer(path)
    chat_model = not word_level(tokenizer)
    if gradient_checkpointing is None:  # --gradient_checkpointing unset: on for a chat model
        gradient_checkpointing = chat_model
    device = device or default_device()
    base = load_base(path, quant, device, resolve_dtype(dtype, device, chat_model))
    # Non-reentrant checkpointing: gradients reach the LoRA weights without the reentrant
    # variant's workaround (inputs that require grad), and it composes with no_grad passes.
    checkpointing = {"use_reentrant": False}
    with warnings.catch_warnings():  # peft still reads a deprecated transformers property
        warnings.simplefilter("ignore", FutureWarning)
        if quant == "nf4":
            base = prepare_model_for_kbit_training(
                base,
                use_gradient_checkpointing=gradient_checkpointing,
                gradient_checkpointing_kwargs=checkpointing,
            )
        elif gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
        base.config.use_cache = True
        if adapter is not None:
            try:
                model = PeftModel.from_pretrained(base, str(adapter), is_trainable=True)
            except (RuntimeError, ValueError, KeyError) as err:  # e.g. a size mismatch
                first = str(err).splitlines()[0]
                raise CheckpointError(
                    f"the adapter in {adapter} does not fit --model {name!r} ({first})"
                ) from err
        else:
            model = get_peft_model(base, lora_config(lora_r, lora_alpha, lora_dropout))
    return model, tokenizer


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def reference_policy(model: PeftModel) -> Iterator[PeftModel]:
    """The KL reference: the same weights with the LoRA adapters switched off."""
    with model.disable_adapter():
        yield model
