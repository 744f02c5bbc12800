"""Published model shapes, as served (book, Chapter 9).

Each :class:`ModelShape` holds what a serving system needs to know about a
decoder: depth, widths, query and key/value heads (grouped-query attention,
Ainslie et al. 2023), the FFN (SwiGLU's three matrices or the classic two),
experts and routing, vocabulary and a sliding attention window. The numbers
of :data:`MODELS` are copied from the models' papers and released configs
(the ``source`` of each names where); ``tests/test_serving_model.py``
checks the parameter counts they imply against the published ones.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer as served.

    Attributes:
        name: label.
        layers, hidden: depth and model width.
        heads: query heads; ``kv_heads``: key/value heads (GQA when fewer).
        head_dim: width of one head.
        ffn: FFN inner width (of one expert, for mixture-of-experts models).
        vocab: vocabulary (embedding rows).
        experts, top_k: experts per MoE layer (0: dense) and experts a token
            goes through.
        gated: SwiGLU FFN (gate, up and down matrices) instead of two.
        tied_embeddings: the output layer reuses the input embedding.
        bias: linear layers and layer norms carry biases (OPT, GPT-2).
        positions: rows of a learned position embedding (0: rotary).
        window: sliding-window attention span (Mistral 7B: 4,096), or None.
        source: where the numbers come from.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    experts: int = 0
    top_k: int = 1
    gated: bool = True
    tied_embeddings: bool = False
    bias: bool = False
    positions: int = 0
    window: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn",
                  "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{self.name}: {f} must be an int >= 1, "
                                 f"got {v!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: heads ({self.heads}) must be a "
                             f"multiple of kv_heads ({self.kv_heads})")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise ValueError(f"{self.name}: top_k must be in 1..experts")
        if self.window is not None and self.window < 1:
            raise ValueError(f"{self.name}: window must be >= 1 or None")

    # ------------------------------------------------------------- widths
    @property
    def q_dim(self) -> int:
        """Width of the queries (and of the attention output)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def moe(self) -> bool:
        return self.experts > 0

    # --------------------------------------------------------- parameters
    @property
    def attn_params_per_layer(self) -> int:
        """Q, K, V and output projections (with their biases if any)."""
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        w = h * q + 2 * h * kv + q * h
        return w + (q + 2 * kv + h if self.bias else 0)

    @property
    def expert_params(self) -> int:
        """One FFN (one expert's): 3 matrices with SwiGLU, else 2."""
        h, f = self.hidden, self.ffn
        w = (3 if self.gated else 2) * h * f
        return w + (f + h if self.bias else 0)

    @property
    def ffn_params_per_layer(self) -> int:
        """Every expert of an MoE layer and its router, or one FFN."""
        if self.moe:
            return self.experts * self.expert_params + self.hidden * \
                self.experts
        return self.expert_params

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden * (2 if self.bias else 1)

    @property
    def params_per_layer(self) -> int:
        return (self.attn_params_per_layer + self.ffn_params_per_layer
                + self.norm_params_per_layer)

    @property
    def embedding_params(self) -> int:
        """Input embedding, output layer (unless tied), position table and
        the final norm."""
        emb = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return (emb + self.positions * self.hidden
                + self.hidden * (2 if self.bias else 1))

    @property
    def params(self) -> int:
        """Every parameter."""
        return self.layers * self.params_per_layer + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (``top_k`` experts)."""
        if not self.moe:
            return self.params
        idle = (self.experts - self.top_k) * self.expert_params
        return self.params - self.layers * idle

    def weight_bytes(self, bytes_per: float = 2) -> float:
        """Bytes of every weight at ``bytes_per`` bytes each."""
        return self.params * bytes_per

    def flops_per_token(self) -> float:
        """Forward FLOPs of one token, attention scores left out:
        2 per active weight (the multiply and the add)."""
        return 2.0 * (self.active_params - self.embedding_params
                      + self.vocab * self.hidden)

    def experts_touched(self, tokens: float) -> float:
        """Experts of one MoE layer that at least one of ``tokens`` routes
        to, expected under uniform routing: ``E (1 - (1 - k/E)^T)``. A
        decode step reads these experts' weights (1 for a dense FFN)."""
        if not self.moe:
            return 1.0
        e, k = self.experts, self.top_k
        return e * (1.0 - (1.0 - k / e) ** max(tokens, 0.0))


_LLAMA3 = ("The Llama 3 Herd of Models (2024), Table 3 (layers, model "
           "dimension, FFN dimension, heads, key/value heads); vocabulary "
           "128,256 from the released config.json (the paper rounds it to "
           "128,000); untied embeddings")
_MISTRAL = ("Mistral 7B (Jiang et al. 2023), Table 1: dim 4096, n_layers "
            "32, head_dim 128, hidden_dim 14336, n_heads 32, n_kv_heads 8, "
            "window_size 4096, vocab_size 32000")
_MIXTRAL = ("Mixtral of Experts (Jiang et al. 2024), Table 1: dim 4096, "
            "n_layers 32, head_dim 128, hidden_dim 14336, n_heads 32, "
            "n_kv_heads 8, vocab_size 32000, num_experts 8, top_k_experts 2")
_OPT = ("OPT (Zhang et al. 2022), Table 1: 13B has 40 layers, 40 heads, "
        "d_model 5120; released config: ffn_dim 20480, vocab 50272, 2048 "
        "positions (+2 offset rows), tied embeddings, biases")

#: the shapes the chapter and the tests use
MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("Llama 3 8B", 32, 4096, 32, 8, 128, 14336, 128256,
               source=_LLAMA3),
    ModelShape("Llama 3 70B", 80, 8192, 64, 8, 128, 28672, 128256,
               source=_LLAMA3),
    ModelShape("Llama 3 405B", 126, 16384, 128, 8, 128, 53248, 128256,
               source=_LLAMA3),
    ModelShape("Mistral 7B", 32, 4096, 32, 8, 128, 14336, 32000,
               window=4096, source=_MISTRAL),
    ModelShape("Mixtral 8x7B", 32, 4096, 32, 8, 128, 14336, 32000,
               experts=8, top_k=2, source=_MIXTRAL),
    ModelShape("OPT-13B", 40, 5120, 40, 40, 128, 20480, 50272, gated=False,
               tied_embeddings=True, bias=True, positions=2050,
               source=_OPT),
)}


def model(name: str) -> ModelShape:
    """A shape of :data:`MODELS` by name."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from "
                         f"{sorted(MODELS)}")
    return MODELS[name]


__all__ = ["MODELS", "ModelShape", "model"]
