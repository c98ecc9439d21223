"""Transformer shapes: presets (gpt3-175b, gpt3-1t, llama2-70b, ...) or a JSON file, and their parameter counts."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pmdb.errors import PmdbError
from planner import jsonspec


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer (pre-norm blocks: attention + MLP), counted in elements and parameters."""

    seq_len: int                 # tokens per sequence (s)
    hidden: int                  # embedding size (h)
    heads: int                   # attention heads (a)
    layers: int                  # transformer blocks
    vocab: int                   # vocabulary size before padding (V)
    ffn_hidden: int = 0          # MLP inner size; 0 = 4 * hidden
    kv_heads: int = 0            # key/value heads (grouped-query attention); 0 = heads (multi-head)
    gated_mlp: bool = False      # SwiGLU-style MLP: two input projections
    causal: bool = True          # causal mask (a fused attention kernel skips the masked half)
    bias: bool = True            # linear biases and LayerNorm bias (False: no biases, RMSNorm)
    learned_positions: bool = True   # learned position embedding of seq_len x hidden
    tied_embeddings: bool = True     # the LM head reuses the word embedding
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        if not self.ffn_hidden:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", self.heads)
        where = f"model {self.name}"
        if self.hidden % self.heads:
            raise PmdbError(f"{where}: hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise PmdbError(f"{where}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_out(self) -> int:
        """Output width of the fused QKV projection: (heads + 2 kv_heads) * head_dim."""
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def fc1_out(self) -> int:
        """Output width of the first MLP projection (doubled for a gated MLP)."""
        return self.ffn_hidden * (2 if self.gated_mlp else 1)

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden if self.bias else self.hidden

    def layer_matrix_params(self) -> int:
        """Weights of the four linears of one block (sharded by tensor parallelism)."""
        h = self.hidden
        return h * self.qkv_out + h * h + h * self.fc1_out + self.ffn_hidden * h

    def layer_params(self) -> int:
        """All parameters of one block: linears, their biases, the two norms (12h² + 13h for GPT)."""
        biases = (self.qkv_out + self.hidden + self.fc1_out + self.hidden) if self.bias else 0
        return self.layer_matrix_params() + biases + 2 * self.norm_params

    def embedding_params(self) -> int:
        """Word (and learned position) embedding."""
        return self.vocab * self.hidden + (self.seq_len * self.hidden if self.learned_positions else 0)

    def total_params(self) -> int:
        """Parameters of the whole model (the tied LM head counted once)."""
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.layers * self.layer_params() + self.embedding_params() + self.norm_params + head

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Transformer] = {m.name: m for m in [
    Transformer(name="gpt2-345m", seq_len=1024, hidden=1024, heads=16, layers=24, vocab=50257),
    Transformer(name="gpt3-13b", seq_len=2048, hidden=5120, heads=40, layers=40, vocab=50257),
    Transformer(name="gpt3-175b", seq_len=2048, hidden=12288, heads=96, layers=96, vocab=50257),
    Transformer(name="gpt3-1t", seq_len=2048, hidden=25600, heads=160, layers=128, vocab=51200),
    Transformer(name="llama2-7b", seq_len=4096, hidden=4096, heads=32, layers=32, vocab=32000, ffn_hidden=11008,
                gated_mlp=True, bias=False, learned_positions=False, tied_embeddings=False),
    Transformer(name="llama2-70b", seq_len=4096, hidden=8192, heads=64, layers=80, vocab=32000, ffn_hidden=28672,
                kv_heads=8, gated_mlp=True, bias=False, learned_positions=False, tied_embeddings=False),
]}

_SPEC: jsonspec.Spec = {
    "name": (str, False), "seq_len": (int, True), "hidden": (int, True), "heads": (int, True),
    "layers": (int, True), "vocab": (int, True), "ffn_hidden": (int, False), "kv_heads": (int, False),
    "gated_mlp": (bool, False), "causal": (bool, False), "bias": (bool, False),
    "learned_positions": (bool, False), "tied_embeddings": (bool, False),
}


def from_dict(data: dict[str, Any], where: str = "model") -> Transformer:
    """A Transformer from a JSON object, refusing unknown keys and missing fields by name."""
    jsonspec.check(data, _SPEC, where)
    values = {k: (int(v) if _SPEC[k][0] is int else v) for k, v in data.items()}
    values.setdefault("name", "custom")
    return Transformer(**values)


def load(name_or_path: str) -> Transformer:
    """A preset by name, or a model JSON file."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        data = jsonspec.read_json(path, "model")
        data.setdefault("name", path.stem)
        return from_dict(data, where=f"model file {path}")
    raise PmdbError(f"unknown model {name_or_path!r} (presets: {', '.join(PRESETS)}; or a JSON file)")
