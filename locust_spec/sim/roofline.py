"""Pure roofline step-time model: how long one engine step takes on a GPU for a given batch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    """A GPU's datasheet numbers: memory bandwidth (bytes/s), dense BF16 tensor throughput (FLOP/s), memory
    (bytes) and maximum board power (watts: what spec-sim's modelled DCGM series draw while it steps)."""

    name: str
    mem_bw: float
    peak_flops: float
    memory: float
    source: str
    board_w: float = 0.0

    def kv_capacity_tokens(self, model: ModelShape) -> int:
        """KV-cache tokens that fit beside the weights at vLLM's default gpu_memory_utilization (0.9)."""
        return max(0, int((self.memory * 0.9 - model.weight_bytes) / model.kv_bytes_per_token))


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("h100", 3.35e12, 989e12, 80e9, "NVIDIA H100 SXM5 sheet: HBM3 3.35 TB/s, BF16 dense 989 TFLOPS, "
            "up to 700 W", 700.0),
        Gpu("h200", 4.8e12, 989e12, 141e9, "NVIDIA H200 SXM sheet: HBM3e 4.8 TB/s, BF16 dense 989 TFLOPS, "
            "up to 700 W", 700.0),
        Gpu("a100", 2.039e12, 312e12, 80e9, "NVIDIA A100 80GB SXM sheet: HBM2e 2,039 GB/s, BF16 312 TFLOPS, "
            "400 W", 400.0),
        Gpu("l40s", 864e9, 362e12, 48e9, "NVIDIA L40S sheet: GDDR6 864 GB/s, BF16 dense 362 TFLOPS, 350 W",
            350.0),
        Gpu("l4", 300e9, 121e12, 24e9, "NVIDIA L4 sheet: GDDR6 300 GB/s, BF16 dense 121 TFLOPS, 72 W", 72.0),
        Gpu("mi300x", 5.3e12, 1307e12, 192e9, "AMD MI300X sheet: HBM3 5.3 TB/s, BF16 dense 1307 TFLOPS, "
            "750 W", 750.0),
    )
}


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder's size and attention shape (the numbers in its config.json)."""

    name: str
    params: float
    n_layers: int
    hidden: int
    n_kv_heads: int
    head_dim: int
    bytes_per_param: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_param


# Llama 3.x shapes, from each model's config.json on Hugging Face (meta-llama/Llama-3.2-1B, -3.2-3B,
# -3.1-8B, -3.1-70B); parameter counts from their model cards. bf16 weights and KV cache.
MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("1b", 1.24e9, 16, 2048, 8, 64),
        ModelShape("3b", 3.21e9, 28, 3072, 8, 128),
        ModelShape("8b", 8.03e9, 32, 4096, 8, 128),
        ModelShape("70b", 70.6e9, 80, 8192, 8, 128),
    )
}

# Fraction of peak tensor throughput that large serving GEMMs reach (model FLOPs utilisation ~50% is
# the usual figure for well-batched inference on H100-class parts).
COMPUTE_EFFICIENCY = 0.5
# vLLM V1 per-step CPU cost outside the GPU work (scheduling, input prep, sampling, detokenisation);
# estimates consistent with published vLLM V1 profiles (hundreds of microseconds per step, a few
# microseconds per running request).
STEP_OVERHEAD_S = 400e-6
STEP_OVERHEAD_PER_SEQ_S = 4e-6
# Extra per step under speculation: rejection sampling and draft bookkeeping, plus the n-gram lookup
# for each request on the CPU (vLLM's proposer runs on the host).
SPEC_OVERHEAD_S = 200e-6
SPEC_OVERHEAD_PER_SEQ_S = 6e-6


@dataclass(frozen=True)
class StepLoad:
    """What one engine step computes: query positions, KV entries read, and (query, key) attention pairs."""

    seqs: int
    query_tokens: int
    kv_tokens: int
    attn_pairs: int


def forward_seconds(gpu: Gpu, model: ModelShape, load: StepLoad) -> float:
    """One forward pass: the slower of streaming weights+KV from memory and doing the FLOPs."""
    if load.query_tokens == 0:
        return 0.0
    memory = (model.weight_bytes + load.kv_tokens * model.kv_bytes_per_token) / gpu.mem_bw
    flops = 2 * model.params * load.query_tokens + 4 * model.n_layers * model.hidden * load.attn_pairs
    compute = flops / (gpu.peak_flops * COMPUTE_EFFICIENCY)
    return max(memory, compute)


def step_seconds(gpu: Gpu, model: ModelShape, load: StepLoad, spec: str = "",
                 draft: ModelShape | None = None, k: int = 0) -> float:
    """Engine step time: target forward + overhead, + draft cost when speculating (`spec` = method)."""
    t = forward_seconds(gpu, model, load) + STEP_OVERHEAD_S + STEP_OVERHEAD_PER_SEQ_S * load.seqs
    if spec:
        t += SPEC_OVERHEAD_S + SPEC_OVERHEAD_PER_SEQ_S * load.seqs
    if spec == "draft_model" and draft is not None:
        # The draft runs k sequential single-position passes over the whole batch.
        one = StepLoad(load.seqs, load.seqs, load.kv_tokens, load.kv_tokens)
        t += k * forward_seconds(gpu, draft, one)
    return t


def model_for(size: str) -> ModelShape:
    """A model shape by preset name (`8b`) or a parameter count in billions (`13`), scaled from 8b's shape."""
    key = size.lower()
    if key in MODELS:
        return MODELS[key]
    billions = float(key.rstrip("b"))
    base = MODELS["8b"]
    scale = billions * 1e9 / base.params
    return ModelShape(key, billions * 1e9, max(1, round(base.n_layers * scale ** (1 / 3))),
                      base.hidden, base.n_kv_heads, base.head_dim)
