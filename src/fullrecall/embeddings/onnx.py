"""The fast local path: a sentence-transformers model exported once to ONNX, run with onnxruntime.

At run time this needs only ``onnxruntime``, ``tokenizers`` and numpy (about
0.2 s to load, 1-4 ms a query on one core). torch is needed once, to export
the model; the export lands under ``cache_dir()/onnx`` with a ``meta.json``
that records the model and its variant (``fp32`` or ``int8``), so vectors of
the two variants are never mixed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._fork import renew_in_child
from .base import batched, empty, l2_normalize
from .local import cache_dir, max_seq_length, model_key, pooling_mode, resolve_model_dir

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

VARIANTS = ("int8", "fp32")
EXPORT_FORMAT = 1  # bump when the exported graph changes, so old exports are not reused
DEFAULT_VARIANT = "int8"


def vector_name(model: str, variant: str) -> str:
    """The name stored with vectors: fp32 ONNX equals sentence-transformers, int8 differs."""
    key = model_key(model)
    return key if variant == "fp32" else f"{key}@{variant}"


def export_dir(model_dir: Path, model: str, variant: str) -> Path:
    """Where the export of this model (identified by its files) and variant lives."""
    h = hashlib.sha1(f"format {EXPORT_FORMAT}".encode())
    for name in ("config.json", "tokenizer.json"):
        f = model_dir / name
        if f.exists():
            h.update(f.read_bytes())
    for name in ("model.safetensors", "pytorch_model.bin"):
        f = model_dir / name
        if f.exists():
            h.update(f"{name}:{f.stat().st_size}".encode())
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_key(model))
    return cache_dir() / "onnx" / f"{slug}-{h.hexdigest()[:12]}" / variant


def find_export(model: str, variant: str) -> Path | None:
    """The cached export directory if it exists, else None."""
    model_dir = resolve_model_dir(model)
    if model_dir is None:
        return None
    out = export_dir(model_dir, model, variant)
    return out if (out / "model.onnx").exists() and (out / "meta.json").exists() else None


def export(model: str, variant: str = DEFAULT_VARIANT, *, force: bool = False) -> Path:
    """Export ``model`` to ONNX (pooling and L2 norm inside the graph); return its directory.

    Needs torch and transformers (plus onnx for int8). Idempotent: an existing
    export is reused unless ``force``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    model_dir = resolve_model_dir(model)
    if model_dir is None:
        raise FileNotFoundError(f"embedding model {model!r} is not available locally (no download is attempted)")
    pooling = pooling_mode(model_dir)
    if pooling is None:
        raise ValueError(f"{model!r} is not a plain Transformer + Pooling model; use the sentence-transformers backend")
    out = export_dir(model_dir, model, variant)
    if not force and (out / "model.onnx").exists() and (out / "meta.json").exists():
        return out
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "exporting the embedding model to ONNX needs torch and transformers "
            "(pip install 'fullrecall[local]'), or copy an existing export into FULLRECALL_CACHE_DIR"
        ) from exc

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{variant}-", dir=out.parent))
    try:
        with _quiet():
            hf = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
        import inspect

        takes_types = "token_type_ids" in inspect.signature(hf.forward).parameters
        names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])

        class Pooled(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
                kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
                if token_type_ids is not None:
                    kwargs["token_type_ids"] = token_type_ids
                hidden = self.inner(**kwargs).last_hidden_state
                if pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

        dummy = torch.ones(2, 8, dtype=torch.long)
        args = (dummy, dummy) + ((torch.zeros_like(dummy),) if takes_types else ())
        axes = {n: {0: "batch", 1: "tokens"} for n in names}
        axes["embedding"] = {0: "batch"}
        fp32 = tmp / "fp32.onnx"
        with torch.no_grad(), _quiet():
            torch.onnx.export(
                Pooled(hf), args, str(fp32), input_names=names, output_names=["embedding"],
                dynamic_axes=axes, opset_version=17, dynamo=False,
            )
        if variant == "int8":
            import logging

            from onnxruntime.quantization import QuantType, quantize_dynamic

            root = logging.getLogger()
            level = root.level
            root.setLevel(logging.ERROR)  # quantize_dynamic logs advice about pre-processing on the root logger
            try:
                quantize_dynamic(str(fp32), str(tmp / "model.onnx"), weight_type=QuantType.QInt8, per_channel=True)
            finally:
                root.setLevel(level)
            fp32.unlink()
        else:
            fp32.rename(tmp / "model.onnx")
        shutil.copy(model_dir / "tokenizer.json", tmp / "tokenizer.json")
        dimension = int(hf.config.hidden_size)
        meta = {
            "model": model_key(model),
            "source": str(model_dir),
            "variant": variant,
            "name": vector_name(model, variant),
            "dimension": dimension,
            "max_seq_length": max_seq_length(model_dir),
            "pooling": pooling,
            "inputs": names,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        if force and out.exists():
            shutil.rmtree(out)
        try:
            os.replace(tmp, out)  # atomic: a reader sees the old export or the whole new one
        except OSError:
            if not (out / "meta.json").exists():  # not another process's finished export: a real error
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter's tracer warnings and progress bars say nothing a user can act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except Exception:  # pragma: no cover - older transformers
            pass
        yield


class OnnxEmbedder:
    """Embeds with an exported ONNX model: tokenizers + onnxruntime, pooling in the graph.

    Every run uses one intra-op thread, which keeps query latency steady when
    other processes share the cores; large inputs (archiving) are spread over
    ``workers`` threads running batches side by side (onnxruntime releases the GIL).

    int8 models use dynamic quantization, whose activation scales depend on the
    whole batch: batching changes a vector slightly (cosine ~0.98-0.99 to the
    unbatched one). So int8 embeds one text per run (``batch_size=1``, measured
    as fast as batching, since nothing is padded): a message gets the same vector
    whatever it is archived with, and the same as a query would.
    """

    def __init__(self, directory: str | Path, *, workers: int | None = None, batch_size: int | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        meta = json.loads((self.directory / "meta.json").read_text())
        self.name: str = meta["name"]
        self.dimension: int = int(meta["dimension"])
        self.variant: str = meta["variant"]
        self._inputs: list[str] = list(meta["inputs"])
        self.batch_size = batch_size or (1 if self.variant == "int8" else 32)
        self.workers = workers if workers is not None else max(1, min(2, os.cpu_count() or 1))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(str(self.directory / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self._pool: ThreadPoolExecutor | None = None
        tok = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        tok.enable_truncation(max_length=int(meta.get("max_seq_length") or 256))
        pad_id = tok.token_to_id("[PAD]")
        if pad_id is None:
            pad_id = tok.token_to_id("<pad>") or 0
        tok.enable_padding(pad_id=pad_id, pad_token=tok.id_to_token(pad_id) or "[PAD]")
        self._tokenizer = tok
        renew_in_child(self)

    def _after_fork(self) -> None:
        self._pool = None  # the parent's threads are not in a forked child (see ``_fork``)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return empty(self.dimension)
        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunks = [list(c) for c in batched(order, self.batch_size)]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if self.workers > 1 and len(texts) >= 8:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="fullrecall-embed")
            results = self._pool.map(lambda c: self._run([texts[i] for i in c]), chunks)
        else:
            results = (self._run([texts[i] for i in c]) for c in chunks)
        for chunk, vectors in zip(chunks, results):
            out[chunk] = vectors
        return l2_normalize(out)

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts) if len(texts) > 1 else [self._tokenizer.encode(texts[0])]
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return self._session.run(None, feed)[0]

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self.name!r}, dimension={self.dimension})"
