"""Run records: what one finished training + evaluation run contributes to the results.

A run directory (``runs/PAIR/PROFILE/SYSTEM/seedN``, named by ``qknorm_tools.config.run_dir``) holds
what ``scripts/train.sh`` and ``scripts/evaluate.sh`` wrote:

* ``train.json`` - the run's identity and training facts (:func:`write_train_json`);
* ``train.log`` - fairseq-train's log (the final QKNorm ``g``; ``g0`` for runs made before
  ``checkpoints/qknorm.json``);
* ``checkpoints/qknorm.json`` - what the model was built with (QKNorm ``g0``, ``L``, type,
  modules; :func:`qk_norm_g0_of_run`);
* ``{split}.score.json`` and ``{split}.hyp`` - scores and hypotheses;
* ``data_identity.json`` - the identity of the data it trained on (:mod:`.provenance`);
* ``command.txt`` - the fairseq-train command (the peak learning rate ``--lr``);
* ``diverged`` - present when the training diverged (the reason; no scores then).

:func:`read_run` turns one into a :class:`RunRecord` by running every reader in
:data:`RUN_READERS`; a later feature (provenance, cluster status) adds its reader there and
its fields to :class:`RunRecord`. A run's identity is (pair, profile, system, seed, variant),
where ``variant`` holds optional run-defining overrides (e.g. ``{"lr": "1e-3"}`` in an LR
sweep).

Records are stored in ``runs.json`` as ``{"work_dir": REL, "runs": [...]}`` with every path
relative to the work directory and ``work_dir`` relative to ``runs.json`` itself, so that a
results folder stays valid when the tree is moved or committed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import trainlog
from .provenance import RUN_IDENTITY_FILE, short_id
from .textio import InputFileError, ResultsError, write_text_atomic

__all__ = [
    "RUN_READERS",
    "RunRecord",
    "as_record",
    "load_records",
    "read_run",
    "relative_path",
    "run_status",
    "save_records",
    "write_train_json",
]

PATH_FIELDS = ("run_dir", "train_log", "hyp_path", "ref_path")


@dataclass
class RunRecord:
    """One run: identity, training facts, scores and the files they came from.

    Scores are BLEU / chrF points (0-100), ``None`` for a run that was not decoded (a diverged
    run). ``qk_norm_length`` is the data's ``L`` (97.5th
    percentile BPE length) passed to the model, ``qk_norm_g0`` the initial QKNorm scale the
    model logged, ``qk_norm_g_final`` the scale per attention module at ``checkpoint_best.pt``
    (``{"enc0_self": g, ...}``). ``data_id`` is the identity (sha256) of the data the run
    trained on and was scored with (:mod:`.provenance`; ``None`` for runs made before data
    identities were recorded). Paths are absolute in memory.
    """

    pair: str
    system: str
    seed: int
    profile: str | None = None
    #: run-defining overrides beyond (pair, profile, system, seed), e.g. ``{"lr": "1e-3"}``
    variant: dict[str, str] = field(default_factory=dict)
    arch: str | None = None
    #: training precision: ``fp32`` or ``bf16`` (bf16 autocast on CPU, ``--bf16-autocast``;
    #: run directory ``seedN-bf16``); ``None`` for runs made before it was recorded (fp32)
    precision: str | None = None
    updates: int | None = None
    wall_seconds: int | None = None
    #: CPU time (user + system, seconds) of the training processes, summed over the attempts
    #: that ended normally (``RUN/cpu_seconds``: ``scripts/train.sh`` records bash's ``times`` of
    #: the training pipeline); ``None`` for runs made before it was recorded
    cpu_seconds: float | None = None
    #: why the training ended (:data:`.trainlog.STOP_REASONS`: ``early_stop``, ``min_lr``,
    #: ``max_update``, ``stop_time``, ``max_epoch``, ``interrupted``) and fairseq's line saying so
    #: (:func:`.trainlog.stop_reason`); ``None`` without a train.log
    stop_reason: str | None = None
    stop_message: str | None = None
    #: the last epoch trained (``None`` without a train.log)
    epochs: int | None = None
    #: the epoch and update of the lowest dev loss (``dev_loss_min``; ties: the later one)
    best_dev_loss_epoch: int | None = None
    best_dev_loss_updates: int | None = None
    #: one point per validation (:func:`.trainlog.dev_curve`): ``{"epoch", "updates", "loss"
    #: (bits per target token), "lr", "wall" (seconds since the training started)}``
    dev_curve: list[dict[str, float | int | None]] = field(default_factory=list)
    qk_norm_length: float | None = None
    paper_qk_norm_length: float | None = None
    qk_norm_g0: float | None = None
    qk_norm_g_final: dict[str, float] = field(default_factory=dict)
    data_id: str | None = None
    #: peak learning rate of the run (``--lr`` of its fairseq-train command)
    lr: float | None = None
    #: dev loss (fairseq's ``loss``: label-smoothed cross-entropy, bits per target token) of
    #: the last validation, and the lowest of all validations; ``None`` without validation
    dev_loss: float | None = None
    dev_loss_min: float | None = None
    #: largest attention logit logged during training and validation (``None`` if the run
    #: logged no attention statistics; see :func:`.trainlog.max_attention_logit`)
    max_attn_logit: float | None = None
    #: why the training diverged (``FloatingPointError: ...`` from ``RUN/diverged``, or
    #: ``non-finite dev loss``); ``None`` for a run that did not
    diverged: str | None = None
    bleu_tok: float | None = None
    bleu: float | None = None
    chrf: float | None = None
    n_lines: int | None = None
    #: tokenized BLEU of the dev set decoded with the same checkpoint and settings as the
    #: scored split (``dev.score.json`` of ``scripts/evaluate.sh --split dev``); ``None`` when
    #: the dev set was not decoded (the CPU profiles select checkpoints by dev loss)
    dev_bleu_tok: float | None = None
    signatures: dict[str, str] = field(default_factory=dict)
    run_dir: str | None = None
    train_log: str | None = None
    hyp_path: str | None = None
    ref_path: str | None = None
    #: fields of a stored record this version does not know (kept when saved again)
    extra: dict[str, object] = field(default_factory=dict)
    #: where the record was read from (for messages; not stored)
    source: str | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple:
        """The run's identity: (pair, profile, system, seed, sorted variant items)."""
        return (
            self.pair,
            self.profile,
            self.system,
            self.seed,
            tuple(sorted(self.variant.items())),
        )

    @property
    def name(self) -> str:
        """The system as a table row: ``SYSTEM`` or ``SYSTEM[k=v,...]`` for a variant."""
        if not self.variant:
            return self.system
        return f"{self.system}[{','.join(f'{k}={v}' for k, v in sorted(self.variant.items()))}]"

    @property
    def qk_norm_g_final_mean(self) -> float | None:
        """Mean final QKNorm scale over attention modules (``None`` without QKNorm)."""
        g = self.qk_norm_g_final
        return sum(g.values()) / len(g) if g else None

    def to_json(self, base_dir: str | None = None) -> dict[str, object]:
        """The record as a JSON object; paths relative to ``base_dir`` when below it."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name in ("extra", "source"):
                continue
            value = getattr(self, f.name)
            if f.name in PATH_FIELDS and value is not None and base_dir is not None:
                value = relative_path(value, base_dir)
            out[f.name] = value
        out["qk_norm_g_final_mean"] = self.qk_norm_g_final_mean
        out.update(self.extra)
        return out

    @classmethod
    def from_json(
        cls, data: Mapping[str, object], base_dir: str | None = None, source: str | None = None
    ) -> RunRecord:
        """A record from :meth:`to_json` output (or an older record with the same keys).

        Relative paths are resolved against ``base_dir``. Unknown keys go to ``extra``.

        Raises:
            ResultsError: ``pair``, ``system`` or ``seed`` missing.
        """
        missing = [k for k in ("pair", "system", "seed") if k not in data]
        if missing:
            raise ResultsError(f"{source or 'record'}: lacks fields {missing}")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "source"}
        kwargs = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k != "qk_norm_g_final_mean"}
        for k in PATH_FIELDS:
            if kwargs.get(k) is not None:
                kwargs[k] = _resolve(str(kwargs[k]), base_dir)
        for k in ("variant", "qk_norm_g_final", "signatures"):
            kwargs[k] = dict(kwargs.get(k) or {})
        kwargs["dev_curve"] = [dict(p) for p in kwargs.get("dev_curve") or []]
        return cls(**kwargs, extra=extra, source=source)

    def score(self, metric: str) -> float | None:
        """The score ``metric`` (``bleu_tok``, ``bleu`` or ``chrf``)."""
        return getattr(self, metric)


def as_record(r: RunRecord | Mapping[str, object]) -> RunRecord:
    """A :class:`RunRecord` from a record or a record-like mapping."""
    return r if isinstance(r, RunRecord) else RunRecord.from_json(r)


def relative_path(path: str, base_dir: str) -> str:
    """``path`` relative to ``base_dir`` when below it, else unchanged."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base_dir))
    return path if rel.startswith("..") else rel


def _resolve(path: str, base_dir: str | None) -> str:
    """An absolute path for ``path``: below ``base_dir`` if it exists there, else as given.

    Symbolic links are kept (``os.path.abspath``, not ``Path.resolve``): a ``data/`` linked to a
    shared corpus copy stays ``data/...`` when the record is written back relative to the checkout.
    """
    p = Path(path)
    if p.is_absolute():
        return str(p)
    if base_dir is not None and (Path(base_dir) / p).exists():
        return os.path.abspath(Path(base_dir) / p)
    return os.path.abspath(p) if p.exists() else str(p)


# ---------------------------------------------------------------------------
# run directory -> record


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputFileError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{str(path)!r} is not valid UTF-8 JSON: {exc}") from None


def _read_train_json(run: Path, rec: RunRecord, split: str) -> None:
    data = _read_json(run / "train.json")
    for k in (
        "profile",
        "arch",
        "precision",
        "updates",
        "wall_seconds",
        "cpu_seconds",
        "qk_norm_length",
        "paper_qk_norm_length",
        "qk_norm_g0",
        "data_id",
    ):
        if data.get(k) is not None:
            setattr(rec, k, data[k])
    rec.variant = dict(data.get("variant") or {})


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _read_train_log(run: Path, rec: RunRecord, split: str) -> None:
    log = run / "train.log"
    if log.is_file():
        rec.train_log = str(log)
        recs = trainlog.parse_log_text(log.read_text(encoding="utf-8", errors="replace"))
        rec.qk_norm_g_final = trainlog.final_qk_norm_g(recs)
        losses = trainlog.series(recs, "valid", "loss")[1]
        if losses:
            rec.dev_loss = _finite(losses[-1])
            rec.dev_loss_min = _finite(
                min(losses, key=lambda v: v if math.isfinite(v) else math.inf)
            )
            if rec.dev_loss is None and rec.diverged is None:
                rec.diverged = "non-finite dev loss"
        rec.max_attn_logit = _finite(trainlog.max_attention_logit(recs))


def _read_convergence(run: Path, rec: RunRecord, split: str) -> None:
    """How the training ended: stop reason, epochs, the dev curve and its best dev loss.

    From ``train.log`` (:func:`.trainlog.stop_reason`, :func:`.trainlog.dev_curve`); a run whose
    training diverged keeps ``stop_reason`` ``interrupted`` (its ``diverged`` says why).
    """
    log = run / "train.log"
    if not log.is_file():
        return
    text = log.read_text(encoding="utf-8", errors="replace")
    recs = trainlog.parse_log_text(text)
    stop = trainlog.stop_reason(text)
    if stop is not None:
        rec.stop_reason, rec.stop_message = stop
    rec.epochs = trainlog.epochs_trained(recs)
    rec.dev_curve = trainlog.dev_curve(recs)
    finite = [p for p in rec.dev_curve if p["loss"] is not None and math.isfinite(p["loss"])]
    if finite:
        low = min(p["loss"] for p in finite)
        best = [p for p in finite if p["loss"] == low][-1]  # fairseq's is_better: <=, the later
        rec.best_dev_loss_epoch, rec.best_dev_loss_updates = best["epoch"], best["updates"]


def _read_command(run: Path, rec: RunRecord, split: str) -> None:
    """The peak learning rate and the divergence marker of a run.

    The learning rate is the last ``--lr`` of ``command.txt`` (as argparse reads it); the
    marker ``diverged`` is what ``scripts/train.sh`` writes when the training diverged.
    """
    marker = run / "diverged"
    if marker.is_file():
        rec.diverged = marker.read_text(encoding="utf-8", errors="replace").strip() or "diverged"
    command = run / "command.txt"
    if command.is_file():
        try:
            tokens = shlex.split(command.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ResultsError(f"{str(command)!r} is not a shell command line: {exc}") from None
        values = [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--lr"]
        if values:
            try:
                rec.lr = float(values[-1].split(",")[0])  # fairseq's --lr is a list
            except ValueError:
                raise ResultsError(
                    f"{str(command)!r}: --lr {values[-1]!r} is not a number"
                ) from None


def _read_scores(run: Path, rec: RunRecord, split: str) -> None:
    if not (run / f"{split}.score.json").is_file():
        return  # a run that was not decoded (read_run checks that scored runs have scores)
    score = _read_json(run / f"{split}.score.json")
    for k in ("bleu_tok", "bleu", "chrf", "n_lines"):
        setattr(rec, k, score.get(k))
    rec.signatures = dict(score.get("signatures") or {})
    rec.hyp_path = str(run / f"{split}.hyp")


def _read_dev_score(run: Path, rec: RunRecord, split: str) -> None:
    """The dev set's tokenized BLEU beside a test score, when the dev set was decoded."""
    if split != "dev" and (run / "dev.score.json").is_file():
        rec.dev_bleu_tok = _read_json(run / "dev.score.json").get("bleu_tok")


def _read_data_identity(run: Path, rec: RunRecord, split: str) -> None:
    """The run's data identity; its score must have been made on the same data."""
    if rec.data_id is None and (run / RUN_IDENTITY_FILE).is_file():
        rec.data_id = _read_json(run / RUN_IDENTITY_FILE).get("data_id")
    if not (run / f"{split}.score.json").is_file():
        return  # not decoded (a diverged run, the LR sweep's lr-0 runs): nothing to compare
    scored_on = _read_json(run / f"{split}.score.json").get("data_id")
    if scored_on is not None and rec.data_id is not None and scored_on != rec.data_id:
        raise ResultsError(
            f"{run}/{split}.score.json was scored on data {short_id(scored_on)}, but the run "
            f"was trained on data {short_id(rec.data_id)}: rerun scripts/evaluate.sh for it"
        )


#: Readers that fill a record from a run directory, in order: ``fn(run_dir, record, split)``.
RUN_READERS: list[Callable[[Path, RunRecord, str], None]] = [
    _read_train_json,
    _read_command,
    _read_train_log,
    _read_convergence,
    _read_scores,
    _read_dev_score,
    _read_data_identity,
]


def run_status(run_dir, split: str = "test", scored: bool = True) -> list[str]:
    """The files a finished run lacks (empty list: finished).

    ``scored=False``: a finished training is enough (``train.json``; scores are read when
    present), for runs that are not decoded: diverged runs, the LR sweep's lr-0 runs.
    """
    run = Path(run_dir)
    need = ("train.json", f"{split}.score.json", f"{split}.hyp") if scored else ("train.json",)
    return [name for name in need if not (run / name).is_file()]


def read_run(
    run_dir, split: str = "test", ref_path: str | None = None, scored: bool = True
) -> RunRecord:
    """The record of a finished run directory.

    Args:
        run_dir: the run directory.
        split: the evaluated split (``test``: ``test.score.json``, ``test.hyp``).
        ref_path: the reference the hypotheses were scored against (stored in the record).
        scored: require the scores (default); ``False`` also reads a run that was trained
            but not decoded (its scores stay ``None``).

    Raises:
        ResultsError: the run is not finished (the missing files are named) or its
            ``train.json`` lacks its identity.
    """
    run = Path(run_dir).resolve()
    missing = run_status(run, split, scored)
    if missing:
        raise ResultsError(f"{run} is not a finished run: no {', '.join(missing)}")
    ident = _read_json(run / "train.json")
    rec = RunRecord.from_json(
        {k: ident.get(k) for k in ("pair", "system", "seed") if k in ident}, source=str(run)
    )
    rec.run_dir = str(run)
    rec.ref_path = str(Path(ref_path).resolve()) if ref_path else None
    for reader in RUN_READERS:
        reader(run, rec, split)
    return rec


#: what the model wrote into its --save-dir (fairseq_qknorm/models/transformer_qknorm.py:
#: QKNORM_RECORD; the tools import no fairseq_qknorm)
QKNORM_RECORD = "checkpoints/qknorm.json"


def qk_norm_g0_of_run(run_dir, log_text: str | None = None) -> float | None:
    """QKNorm's initial scale g0 of a run, as the model recorded it.

    Read from ``RUN/checkpoints/qknorm.json`` (written by the model when it is built for
    training: ``qk_norm_g0``, ``None`` for a model without l2 QKNorm); for a run made before
    the model wrote that file, from its log line in ``log_text`` (:func:`.trainlog.qk_norm_g0`).

    Raises:
        ResultsError: a ``qknorm.json`` that is not valid JSON or whose g0 is not a number.
    """
    path = Path(run_dir) / QKNORM_RECORD
    if not path.is_file():
        return trainlog.qk_norm_g0(log_text or "")
    g0 = _read_json(path).get("qk_norm_g0")
    if g0 is not None and (isinstance(g0, bool) or not isinstance(g0, (int, float))):
        raise ResultsError(f"{str(path)!r}: qk_norm_g0 is {g0!r}, expected a number or null")
    return None if g0 is None else float(g0)


def write_train_json(run_dir, identity: Mapping[str, object]) -> RunRecord:
    """Write ``run_dir/train.json`` for a finished training (what ``scripts/train.sh`` calls).

    Adds to ``identity`` (pair, profile, system, seed, arch, qk_norm_length, ...) the facts
    read from the run: ``updates`` (largest ``num_updates`` in ``train.log``),
    ``wall_seconds`` (accumulated over resumes in ``wall_seconds``), ``cpu_seconds`` (likewise
    in ``cpu_seconds``, when ``scripts/train.sh`` recorded it), ``qk_norm_g0``
    (:func:`qk_norm_g0_of_run`: the model's ``qknorm.json``, for older runs its log line;
    ``None`` without QKNorm) and ``data_id`` (the data
    identity ``scripts/train.sh`` recorded in ``data_identity.json``). Written atomically.

    Returns:
        The training part of the run's record.
    """
    run = Path(run_dir)
    log = (run / "train.log").read_text(encoding="utf-8", errors="replace")
    wall = run / "wall_seconds"
    rec = RunRecord.from_json(dict(identity), source=str(run))
    rec.updates = trainlog.last_num_updates(log)
    rec.wall_seconds = int(wall.read_text().strip()) if wall.is_file() else None
    cpu = run / "cpu_seconds"
    if cpu.is_file():
        try:
            rec.cpu_seconds = round(float(cpu.read_text().strip()), 2)
        except ValueError:
            raise ResultsError(f"{str(cpu)!r} is not a number of seconds") from None
    rec.qk_norm_g0 = qk_norm_g0_of_run(run, log)
    if (run / RUN_IDENTITY_FILE).is_file():
        rec.data_id = _read_json(run / RUN_IDENTITY_FILE).get("data_id")
    keep = (
        "pair",
        "profile",
        "system",
        "seed",
        "variant",
        "arch",
        "precision",
        "updates",
        "wall_seconds",
        "cpu_seconds",
        "qk_norm_length",
        "paper_qk_norm_length",
        "qk_norm_g0",
        "data_id",
    )
    data = {k: v for k, v in rec.to_json().items() if k in keep}
    write_text_atomic(run / "train.json", json.dumps(data, indent=2) + "\n")
    return rec


# ---------------------------------------------------------------------------
# runs.json


def save_records(records: Iterable[RunRecord], path, work_dir=None) -> None:
    """Write ``{"work_dir": REL, "runs": [...]}`` atomically.

    Paths below ``work_dir`` are stored relative to it; ``work_dir`` itself relative to the
    file's directory.
    """
    path = Path(path)
    base = str(work_dir) if work_dir is not None else None
    doc = {
        "work_dir": os.path.relpath(os.path.abspath(base), path.parent.resolve()) if base else None,
        "runs": [r.to_json(base) for r in records],
    }
    write_text_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def work_dir_of(data, f: Path) -> str | None:
    """The work dir a ``runs.json`` (:func:`save_records`; ``data`` its JSON) stores paths below."""
    if isinstance(data, dict) and data.get("work_dir") is not None:
        return str(Path(f).parent / data["work_dir"])
    return None


def _file_records(f: Path) -> list[RunRecord]:
    data = _read_json(f)
    base = work_dir_of(data, f)
    if isinstance(data, dict) and "runs" in data:
        data = data["runs"]
    items = data if isinstance(data, list) else [data]
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ResultsError(f"results file {str(f)!r}: record {i} is not an object")
        # paths relative to the work dir, else (older records) to the current dir or the file
        rec = RunRecord.from_json(item, base or str(f.parent), source=f"{f} record {i}")
        out.append(rec)
    return out


def load_records(source) -> list[RunRecord]:
    """Load run records.

    Args:
        source: a ``runs.json`` (:func:`save_records`), a JSON file holding a record or a list
            of records, or a directory whose ``*.json`` files (non-recursive, sorted) each hold
            one of these. Records need ``pair``, ``system`` and ``seed``; scores are
            ``bleu_tok``, ``bleu``, ``chrf`` (BLEU points) and the paired tests read
            ``hyp_path``.

    Raises:
        InputFileError: unreadable file.
        ResultsError: not JSON, missing fields, or a run identity twice (both sources named).
    """
    source = Path(source)
    files = sorted(source.glob("*.json")) if source.is_dir() else [source]
    if not files:
        raise ResultsError(f"no *.json result files in directory {str(source)!r}")
    records, seen = [], {}
    for f in files:
        for rec in _file_records(f):
            if rec.key in seen:
                raise ResultsError(
                    f"duplicate record pair={rec.pair!r} system={rec.name!r} seed={rec.seed!r} "
                    f"in {str(f)!r} (also in {seen[rec.key]!r})"
                )
            seen[rec.key] = str(f)
            records.append(rec)
    return records
