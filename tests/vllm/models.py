"""Build, with no downloads and fixed seeds, a tiny random-weight Llama target and its vLLM drafts."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [IM_START, IM_END, "<|endoftext|>"]
VOCAB_SIZE = 4096
CORPUS_BYTES = 3_000_000
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    + IM_START + "{{ message['role'] }}\n{{ message['content'] }}" + IM_END + "\n"
    + "{% endfor %}"
    + "{% if add_generation_prompt %}" + IM_START + "assistant\n{% endif %}"
)
TARGET_SHAPE = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 512}
# At 0.04 greedy output falls into loops that n-gram lookup can match; at 0.08 it finds nothing.
INITIALIZER_RANGE = 0.04
NOISE_FRACTION = 0.03
TARGET_SEED, NOISE_SEED, UNRELATED_SEED = 1234, 5678, 9012
MODEL_NAMES = ("target", "draft-copy", "draft-noisy", "draft-unrelated")


@dataclass(frozen=True)
class ModelSet:
    """Folders of the built models; every draft shares the target's tokenizer."""

    root: Path

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def draft_copy(self) -> Path:
        return self.root / "draft-copy"

    @property
    def draft_noisy(self) -> Path:
        return self.root / "draft-noisy"

    @property
    def draft_unrelated(self) -> Path:
        return self.root / "draft-unrelated"


def builder_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def corpus_files() -> list[Path]:
    """Local text only, in a fixed order: the Debian licence texts, then standard-library sources."""
    licences = sorted(p for p in Path("/usr/share/common-licenses").glob("*") if p.is_file())
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    chosen, total = [], 0
    for path in licences + stdlib:
        if total >= CORPUS_BYTES:
            break
        chosen.append(path)
        total += path.stat().st_size
    return chosen


def train_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = (p.read_text(errors="replace") for p in corpus_files())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=IM_START, eos_token=IM_END,
                                   pad_token="<|endoftext|>", unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def llama(tokenizer, seed: int, **shape):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=2048,
                         initializer_range=INITIALIZER_RANGE, tie_word_embeddings=False,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, torch_dtype="bfloat16", **shape)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def add_noise(model, fraction: float, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            scale = float(param.float().std()) if param.numel() > 1 else 0.0
            param.add_(torch.randn(param.shape, generator=gen) * (scale * fraction))
    return model


def save(model, tokenizer, out: Path) -> None:
    import torch

    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def build(root: Path) -> ModelSet:
    """Write the four model folders under `root` (run in the vLLM venv: torch/transformers live there)."""
    import torch

    torch.use_deterministic_algorithms(True)
    models = ModelSet(root)
    tokenizer = train_tokenizer(root / "tokenizer")
    save(llama(tokenizer, TARGET_SEED, **TARGET_SHAPE), tokenizer, models.target)
    shutil.copytree(models.target, models.draft_copy)
    noisy = add_noise(llama(tokenizer, TARGET_SEED, **TARGET_SHAPE), NOISE_FRACTION, NOISE_SEED)
    save(noisy, tokenizer, models.draft_noisy)
    save(llama(tokenizer, UNRELATED_SEED, **{**TARGET_SHAPE, "num_hidden_layers": 2}), tokenizer,
         models.draft_unrelated)
    shutil.rmtree(root / "tokenizer")
    return models


def ensure_models(cache: Path, python: Path) -> ModelSet:
    """Reuse `cache/models-<builder hash>` or build it with `python` (the vLLM venv's interpreter)."""
    models = ModelSet(cache / f"models-{builder_hash()}")
    if (models.root / "built.json").exists():
        return models
    staging = models.root.with_name(models.root.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(python), __file__, str(staging)], capture_output=True, text=True, env=env,
                          timeout=600)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"model build failed (exit {done.returncode}):\n{tail}")
    (staging / "built.json").write_text(json.dumps({"builder": builder_hash()}))
    shutil.rmtree(models.root, ignore_errors=True)
    staging.rename(models.root)
    return models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the tiny target and draft models into OUT.")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    build(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
