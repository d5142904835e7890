"""A Llama decoder in plain torch, with its key-value cache as explicit tensors, loaded from a
GGUF file: what the zoo exports SmolLM2 from.

One call is one step of a generation: the new tokens (the whole prompt at prefill, one token
at each decode step), the attention mask of every position so far and the cache so far in; the
next token's logits and the cache grown by the new tokens out. The mask is what lets one call
carry several prompts of different lengths: each is padded on the left to the longest (0 in the
mask), a padding position is seen by no real token, and each row's positions (for the rotary
embedding) count its real tokens only, so a row's tokens are those it would get alone. The
cache is two tensors, keys and values of every layer stacked,
``[layers, batch, kv_heads, positions, head_dim]``, so that a graph exported from it (ONNX,
TorchScript) runs a whole generation with nothing but its inputs and outputs: the worker
feeds each step's ``present`` back as the next step's ``past``.

Weights are as GGUF keeps them: llama.cpp's converter reorders the rows of the query and key
projections so that rotary embedding rotates adjacent pairs (its "normal" rope), so this
module rotates pairs too and uses the rows as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional

__all__ = ["LlamaConfig", "LlamaStep", "read_gguf"]


@dataclass(frozen=True)
class LlamaConfig:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocabulary: int
    context: int
    rope_base: float
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def read_gguf(path: Path) -> tuple[LlamaConfig, dict[str, NDArray[np.float32]], dict[str, Any]]:
    """The model's shape, its weights dequantised to float32 (by GGUF tensor name), and the
    file's other metadata (the tokenizer's vocabulary and merges, its chat template)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    fields = {name: field.contents() for name, field in reader.fields.items()}
    arch = fields["general.architecture"]
    if arch != "llama":
        raise ValueError(f"{path.name}: a {arch} model, not llama")
    config = LlamaConfig(
        layers=int(fields["llama.block_count"]),
        hidden=int(fields["llama.embedding_length"]),
        intermediate=int(fields["llama.feed_forward_length"]),
        heads=int(fields["llama.attention.head_count"]),
        kv_heads=int(fields["llama.attention.head_count_kv"]),
        vocabulary=int(fields["llama.vocab_size"]),
        context=int(fields["llama.context_length"]),
        rope_base=float(fields["llama.rope.freq_base"]),
        norm_eps=float(fields["llama.attention.layer_norm_rms_epsilon"]),
    )
    weights = {
        tensor.name: np.ascontiguousarray(
            gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32
        ).reshape(tuple(reversed(tensor.shape.tolist())))
        for tensor in reader.tensors
    }
    return config, weights, fields


class _RMSNorm(nn.Module):
    def __init__(self, weight: NDArray[np.float32], eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.from_numpy(weight.copy()), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _linear(weight: NDArray[np.float32]) -> nn.Linear:
    rows, columns = weight.shape
    layer = nn.Linear(columns, rows, bias=False)
    layer.weight = nn.Parameter(torch.from_numpy(weight.copy()), requires_grad=False)
    return layer


class _Block(nn.Module):
    def __init__(self, config: LlamaConfig, w: dict[str, NDArray[np.float32]], i: int) -> None:
        super().__init__()
        p = f"blk.{i}."
        self.config = config
        self.attn_norm = _RMSNorm(w[p + "attn_norm.weight"], config.norm_eps)
        self.q = _linear(w[p + "attn_q.weight"])
        self.k = _linear(w[p + "attn_k.weight"])
        self.v = _linear(w[p + "attn_v.weight"])
        self.o = _linear(w[p + "attn_output.weight"])
        self.ffn_norm = _RMSNorm(w[p + "ffn_norm.weight"], config.norm_eps)
        self.gate = _linear(w[p + "ffn_gate.weight"])
        self.up = _linear(w[p + "ffn_up.weight"])
        self.down = _linear(w[p + "ffn_down.weight"])
        self.scale = 1.0 / float(np.sqrt(config.head_dim))

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        batch, length = x.shape[0], x.shape[1]
        return x.view(batch, length, heads, self.config.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        allowed: torch.Tensor,
        past_key: torch.Tensor,
        past_value: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = self.config
        h = self.attn_norm(x)
        q = _rotate(self._heads(self.q(h), c.heads), cos, sin)
        k = _rotate(self._heads(self.k(h), c.kv_heads), cos, sin)
        v = self._heads(self.v(h), c.kv_heads)
        key = torch.cat([past_key, k], dim=2)
        value = torch.cat([past_value, v], dim=2)
        group = c.heads // c.kv_heads
        scores = (q @ key.repeat_interleave(group, dim=1).transpose(-1, -2)) * self.scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        attended = torch.softmax(scores, dim=-1) @ value.repeat_interleave(group, dim=1)
        x = x + self.o(attended.transpose(1, 2).reshape(x.shape))
        h = self.ffn_norm(x)
        x = x + self.down(functional.silu(self.gate(h)) * self.up(h))
        return x, key, value


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on adjacent pairs (x[2i], x[2i+1]), as GGUF's row order expects."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return turned.reshape(x.shape)


class LlamaStep(nn.Module):
    """``(input_ids [batch, new], attention_mask [batch, past + new], past_key, past_value) ->
    (logits [batch, vocabulary] of the last new token, present_key, present_value)``; the cache
    is ``[layers, batch, kv_heads, positions, head_dim]`` and may hold no position yet. Rows are
    padded on the left, so every row's last new token is a real one."""

    inv_freq: torch.Tensor

    def __init__(self, config: LlamaConfig, weights: dict[str, NDArray[np.float32]]) -> None:
        super().__init__()
        self.config = config
        embedding = torch.from_numpy(weights["token_embd.weight"].copy())
        self.embedding = nn.Parameter(embedding, requires_grad=False)
        self.blocks = nn.ModuleList(_Block(config, weights, i) for i in range(config.layers))
        self.norm = _RMSNorm(weights["output_norm.weight"], config.norm_eps)
        # Models that do not tie their output to the embedding have an output matrix.
        output = weights.get("output.weight")
        self.output = None if output is None else _linear(output)
        half = torch.arange(0, config.head_dim, 2, dtype=torch.float32) / config.head_dim
        self.register_buffer("inv_freq", 1.0 / (config.rope_base**half), persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past_key: torch.Tensor,
        past_value: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        new = input_ids.shape[1]
        past = past_key.shape[3]
        # A token's position is the number of real tokens before it in its row (padding takes
        # none), so a left-padded prompt is rotated as it would be alone.
        counted = attention_mask.cumsum(-1)[:, past:] - 1
        positions = counted.clamp(min=0).to(torch.float32)
        angles = positions[..., None] * self.inv_freq
        cos, sin = torch.cos(angles)[:, None], torch.sin(angles)[:, None]
        # Token i of the new ones sees the real tokens among the past positions and the new
        # ones up to itself; every token sees itself, so a padding row is never all masked
        # (its softmax would be NaN, and NaN times a zero weight is still NaN).
        slots = torch.arange(past + new)[None, :]
        at = (torch.arange(new) + past)[:, None]
        seen = ((slots <= at)[None] & attention_mask.bool()[:, None, :]) | (slots == at)[None]
        seen = seen[:, None]  # one mask for every head
        x = functional.embedding(input_ids, self.embedding)
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            x, key, value = block(x, cos, sin, seen, past_key[i], past_value[i])
            keys.append(key)
            values.append(value)
        last = self.norm(x[:, -1, :])
        # linear() with the embedding itself: an exported graph keeps one copy of the matrix.
        logits = (
            functional.linear(last, self.embedding) if self.output is None else self.output(last)
        )
        return logits, torch.stack(keys), torch.stack(values)
