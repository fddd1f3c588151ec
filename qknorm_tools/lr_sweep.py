"""The learning-rate sweep: loss and BLEU against the peak learning rate, per system.

Final dev loss and test BLEU per learning rate, LR sensitivity, diverged runs and
attention-logit growth (``scripts/lr_sweep.sh``).

Runs come from ``runs.json`` (``python -m qknorm_tools.collect runs --keep-unscored``): one
record per (system, seed, peak learning rate), plus, per (system, seed), one record with
``lr == 0``: the initial model (``scripts/lr_sweep.sh`` trains it for one update at learning
rate 0, which leaves every parameter as initialized, and fairseq validates it), whose dev loss
is the *loss at initialization* ``l0``. The initialization does not depend on the learning
rate (fairseq seeds torch before it builds the model), so one ``l0`` serves every LR of a seed.

**LR sensitivity** (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
training instabilities", arXiv:2309.14322, Sec. 2.2): over a grid of learning rates spanning
orders of magnitude,

    LR sensitivity = mean over eta of min(l(eta), l0)  -  min over eta of min(l(eta), l0)

with ``l(eta)`` the final loss of the run trained at peak learning rate ``eta`` (here the last
dev loss, fairseq's label-smoothed cross-entropy in bits per target token) and ``l0`` the loss
at initialization; a diverged run (no finite loss) counts as ``l0``. It is computed per seed
(each seed is one LR curve) and averaged over seeds. A run is **diverged** when its training
stopped on non-finite values (``RUN/diverged``, fairseq's ``FloatingPointError``), its dev loss
is not finite, or its final dev loss is above ``l0``. The **best LR** has the lowest mean over
seeds of ``min(l(eta), l0)``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import trainlog
from .config_schema import lr_spelling as format_lr  # the one spelling of an lr
from .records import RunRecord, as_record
from .tables import write_markdown_and_json
from .textio import ResultsError, warn

__all__ = [
    "LRPoint",
    "LRSweepResult",
    "SweepRun",
    "SystemSweep",
    "format_lr",
    "lr_sensitivity",
    "lr_sweep",
    "lr_sweep_markdown",
    "write_lr_sweep_report",
]

CITATION = (
    "Wortsman et al. 2023, Small-scale proxies for large-scale Transformer training "
    "instabilities, arXiv:2309.14322, Sec. 2.2"
)


@dataclass
class SweepRun:
    """One run of the sweep: a system trained at one peak learning rate with one seed.

    Losses are fairseq's dev ``loss`` (label-smoothed cross-entropy, bits per target token),
    scores BLEU / chrF points (``None`` for a diverged run, which is not decoded).
    """

    system: str
    seed: int
    lr: float
    #: final dev loss (``None`` when the training stopped on non-finite values, as its final
    #: loss is undefined, or when not finite) and the lowest dev loss logged
    dev_loss: float | None
    dev_loss_min: float | None
    #: dev loss of this system and seed at initialization (``None``: no lr-0 run)
    init_loss: float | None
    #: why the run counts as diverged (``None``: it did not)
    diverged: str | None
    bleu_tok: float | None
    bleu: float | None
    chrf: float | None
    updates: int | None
    #: the largest attention logit logged (training and validation)
    max_attn_logit: float | None
    #: ``[num_updates, max attention logit over modules]`` of the training log
    max_attn_logit_series: list[list[float | None]] = field(default_factory=list)
    run_dir: str | None = None

    @property
    def capped_loss(self) -> float | None:
        """``min(l, l0)``: the final dev loss, ``l0`` if the run diverged or lost more."""
        if self.init_loss is None:
            return None
        if self.dev_loss is None:
            return self.init_loss
        return min(self.dev_loss, self.init_loss)


@dataclass
class LRPoint:
    """One system at one peak learning rate, over seeds (values in seed order)."""

    lr: float
    seeds: list[int]
    dev_loss: list[float | None]
    capped_loss: list[float | None]
    bleu_tok: list[float | None]
    max_attn_logit: list[float | None]
    diverged: list[bool]

    @property
    def n_diverged(self) -> int:
        """How many seeds diverged at this learning rate."""
        return sum(self.diverged)

    @property
    def capped_loss_mean(self) -> float | None:
        """Mean over seeds of ``min(l, l0)`` (``None`` if a seed lacks ``l0``)."""
        vals = self.capped_loss
        return statistics.fmean(vals) if vals and None not in vals else None

    @property
    def bleu_tok_mean(self) -> float | None:
        """Mean tokenized BLEU over the seeds that did not diverge (``None``: none)."""
        vals = [b for b in self.bleu_tok if b is not None]
        return statistics.fmean(vals) if vals else None


@dataclass
class SystemSweep:
    """The sweep of one system: its LR curve and summary statistics."""

    system: str
    points: list[LRPoint]
    #: loss at initialization per seed
    init_loss: dict[int, float]
    #: LR sensitivity per seed (:func:`lr_sensitivity`) and their mean
    lr_sensitivity_per_seed: dict[int, float]
    lr_sensitivity: float | None
    n_runs: int
    n_diverged: int
    best_lr: float | None
    best_loss: float | None

    @property
    def lrs(self) -> list[float]:
        """The learning rates of the curve, ascending."""
        return [p.lr for p in self.points]


@dataclass
class LRSweepResult:
    """The whole sweep of one pair under one profile label."""

    pair: str
    profile: str | None
    lrs: list[float]
    seeds: list[int]
    systems: list[SystemSweep]
    runs: list[SweepRun]
    definition: str = CITATION

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (``nan`` stored as ``null``; derived means included)."""
        out = _nan_to_none(dataclasses.asdict(self))
        for s_out, s in zip(out["systems"], self.systems):
            s_out["lrs"] = s.lrs
            for p_out, p in zip(s_out["points"], s.points):
                p_out["capped_loss_mean"] = p.capped_loss_mean
                p_out["bleu_tok_mean"] = p.bleu_tok_mean
        for r_out, r in zip(out["runs"], self.runs):
            r_out["capped_loss"] = r.capped_loss
        return out


def _nan_to_none(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj


def lr_sensitivity(final_losses: Sequence[float | None], init_loss: float) -> float:
    """LR sensitivity of one LR curve (Wortsman et al. 2023, Sec. 2.2).

    ``mean_eta min(l(eta), l0) - min_eta min(l(eta), l0)``, where a diverged run (``None`` or a
    non-finite loss) counts as ``l0``. In the units of the losses (here bits per token); 0 when
    every learning rate reaches the same loss (or every run diverged).

    Args:
        final_losses: the final loss ``l(eta)`` at each learning rate of the grid.
        init_loss: ``l0``, the loss at initialization.

    Returns:
        The LR sensitivity (>= 0).

    Raises:
        ResultsError: an empty grid or a non-finite ``init_loss``.
    """
    if not final_losses:
        raise ResultsError("LR sensitivity of an empty learning-rate grid")
    if init_loss is None or not math.isfinite(init_loss):
        raise ResultsError(f"LR sensitivity needs a finite loss at initialization, got {init_loss}")
    capped = [
        init_loss if loss is None or not math.isfinite(loss) else min(loss, init_loss)
        for loss in final_losses
    ]
    return statistics.fmean(capped) - min(capped)


def _seed_key(seed) -> tuple:
    try:
        return (0, float(seed), str(seed))
    except (TypeError, ValueError):
        return (1, 0.0, str(seed))


def _series(rec: RunRecord) -> list[list[float | None]]:
    if not rec.train_log:
        return []
    try:
        recs = trainlog.parse_log(rec.train_log)
    except trainlog.LogInputError:
        return []
    xs, ys = trainlog.max_attention_logit_series(recs)
    return [[x, y if math.isfinite(y) else None] for x, y in zip(xs, ys)]


def _sweep_run(rec: RunRecord, init_loss: float | None) -> SweepRun:
    diverged, final = rec.diverged, rec.dev_loss
    if diverged is not None:
        final = None  # stopped on non-finite values: a validation before it is not the final loss
    elif final is None:
        diverged = "no finite dev loss"
    elif init_loss is not None and final > init_loss:
        diverged = f"final dev loss {final:.3f} above the loss at initialization {init_loss:.3f}"
    return SweepRun(
        system=rec.system,
        seed=rec.seed,
        lr=rec.lr,
        dev_loss=final,
        dev_loss_min=rec.dev_loss_min,
        init_loss=init_loss,
        diverged=diverged,
        bleu_tok=rec.bleu_tok,
        bleu=rec.bleu,
        chrf=rec.chrf,
        updates=rec.updates,
        max_attn_logit=rec.max_attn_logit,
        max_attn_logit_series=_series(rec),
        run_dir=rec.run_dir,
    )


def _system_sweep(system: str, runs: Sequence[SweepRun], init: Mapping[int, float]) -> SystemSweep:
    by_lr: dict[float, list[SweepRun]] = {}
    for r in runs:
        by_lr.setdefault(r.lr, []).append(r)
    points = []
    for lr in sorted(by_lr):
        rs = sorted(by_lr[lr], key=lambda r: _seed_key(r.seed))
        points.append(
            LRPoint(
                lr=lr,
                seeds=[r.seed for r in rs],
                dev_loss=[r.dev_loss for r in rs],
                capped_loss=[r.capped_loss for r in rs],
                bleu_tok=[None if r.diverged else r.bleu_tok for r in rs],
                max_attn_logit=[r.max_attn_logit for r in rs],
                diverged=[r.diverged is not None for r in rs],
            )
        )
    per_seed = {}
    for seed in sorted({r.seed for r in runs}, key=_seed_key):
        if seed not in init:
            warn(f"{system} seed {seed}: no lr-0 run (loss at initialization): no LR sensitivity")
            continue
        curve = sorted((r for r in runs if r.seed == seed), key=lambda r: r.lr)
        per_seed[seed] = lr_sensitivity([r.dev_loss for r in curve], init[seed])
    best = [(p.capped_loss_mean, p.lr) for p in points if p.capped_loss_mean is not None]
    best_loss, best_lr = min(best) if best else (None, None)
    return SystemSweep(
        system=system,
        points=points,
        init_loss={s: init[s] for s in sorted(init, key=_seed_key)},
        lr_sensitivity_per_seed=per_seed,
        lr_sensitivity=statistics.fmean(per_seed.values()) if per_seed else None,
        n_runs=len(runs),
        n_diverged=sum(r.diverged is not None for r in runs),
        best_lr=best_lr,
        best_loss=best_loss,
    )


def lr_sweep(
    records: Iterable[RunRecord | Mapping[str, object]],
    pair: str | None = None,
    systems: Sequence[str] | None = None,
) -> LRSweepResult:
    """The LR sweep of ``records`` (one pair, one profile label for the swept runs).

    Args:
        records: run records with ``lr``; those with ``lr == 0`` are the initial models.
        pair: the pair to report (default: the only one in ``records``).
        systems: the systems to report, in this order (default: order of first appearance).

    Returns:
        The :class:`LRSweepResult`.

    Raises:
        ResultsError: no swept run, several pairs without ``pair``, a record without ``lr``,
            swept runs of different profile labels (budgets), a run twice, or an initial
            model without a finite dev loss.
    """
    recs = [as_record(r) for r in records]
    pairs = sorted({r.pair for r in recs})
    if pair is None:
        if len(pairs) != 1:
            raise ResultsError(f"records of several pairs {pairs}: choose one (--pair)")
        pair = pairs[0]
    recs = [r for r in recs if r.pair == pair]
    if systems is not None:
        recs = [r for r in recs if r.system in systems]
    no_lr = [r.run_dir or r.name for r in recs if r.lr is None]
    if no_lr:
        raise ResultsError(f"runs without a learning rate (no --lr in command.txt): {no_lr}")
    init_recs = [r for r in recs if r.lr == 0]
    swept = [r for r in recs if r.lr > 0]
    if not swept:
        raise ResultsError(f"no run with a learning rate > 0 for {pair}")
    labels = sorted({str(r.profile) for r in swept})
    if len(labels) != 1:
        raise ResultsError(f"swept runs of several profiles/budgets {labels}: one sweep at a time")
    init: dict[str, dict[int, float]] = {}
    for r in init_recs:
        if r.dev_loss is None:
            raise ResultsError(f"initial-model run {r.run_dir}: no finite dev loss")
        if r.seed in init.setdefault(r.system, {}):
            raise ResultsError(f"two initial-model runs for {r.system} seed {r.seed}")
        init[r.system][r.seed] = r.dev_loss
    seen = set()
    for r in swept:
        key = (r.system, r.seed, r.lr)
        if key in seen:
            raise ResultsError(f"{r.system} seed {r.seed} lr {format_lr(r.lr)}: two runs")
        seen.add(key)
    order = list(systems) if systems is not None else list(dict.fromkeys(r.system for r in swept))
    runs = [_sweep_run(r, init.get(r.system, {}).get(r.seed)) for r in swept]
    runs.sort(key=lambda r: (order.index(r.system), r.lr, _seed_key(r.seed)))
    result = [
        _system_sweep(s, [r for r in runs if r.system == s], init.get(s, {}))
        for s in order
        if any(r.system == s for r in runs)
    ]
    grids = {tuple(s.lrs) for s in result}
    if len(grids) > 1:
        warn("the systems were swept over different learning rates: sensitivities not comparable")
    return LRSweepResult(
        pair=pair,
        profile=labels[0],
        lrs=sorted({r.lr for r in runs}),
        seeds=sorted({r.seed for r in runs}, key=_seed_key),
        systems=result,
        runs=runs,
    )


# ---------------------------------------------------------------------------
# report


def _f(x: float | None, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def _cell(values: Sequence[float | None], n_diverged: int, spec: str = ".2f") -> str:
    finite = [v for v in values if v is not None]
    text = _f(statistics.fmean(finite), spec) if finite else "–"
    if len(finite) > 1:
        text += " (" + ", ".join(format(v, spec) for v in finite) + ")"
    if n_diverged:
        text += f" †{n_diverged}"
    return text


def lr_sweep_markdown(res: LRSweepResult) -> str:
    """The sweep as Markdown.

    A summary per system, then final dev loss, BLEU and max attention logit per system and
    learning rate. A sweep without any scored run (train-only, as the size axis' cells) gets a
    one-line note in place of the BLEU table.
    """
    lrs = res.lrs
    head = "| system | " + " | ".join(f"lr {format_lr(lr)}" for lr in lrs) + " |"
    rule = "|---|" + "---:|" * len(lrs)
    seeds = ", ".join(map(str, res.seeds))
    lines = [
        f"# LR sweep: {res.pair}, profile `{res.profile}`, seeds {seeds}",
        "",
        "| system | LR sensitivity (per seed) | diverged runs | best LR | best dev loss "
        "| dev loss at init |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in res.systems:
        per_seed = ", ".join(f"{v:.3f}" for v in s.lr_sensitivity_per_seed.values())
        init = statistics.fmean(s.init_loss.values()) if s.init_loss else None
        lines.append(
            f"| {s.system} | {_f(s.lr_sensitivity, '.3f')} ({per_seed or '–'}) | "
            f"{s.n_diverged}/{s.n_runs} | {format_lr(s.best_lr) if s.best_lr else '–'} | "
            f"{_f(s.best_loss, '.3f')} | {_f(init, '.3f')} |"
        )
    tables = (
        (
            "Final dev loss (bits per token, label-smoothed; mean (per seed) of the runs that "
            "did not diverge)",
            "dev_loss",
            ".3f",
        ),
        (
            "Test BLEU (tokenized, checkpoint with the best dev loss; runs that did not diverge)",
            "bleu_tok",
            ".2f",
        ),
        (
            "Max attention logit (largest logged over training, all modules)",
            "max_attn_logit",
            ".3g",
        ),
    )
    scored = any(v is not None for s in res.systems for p in s.points for v in p.bleu_tok)
    for title, attr, spec in tables:
        if attr == "bleu_tok" and not scored:  # a train-only sweep (--sizes): no column of dashes
            lines += ["", "Test BLEU: not decoded (a train-only sweep: dev loss only)."]
            continue
        lines += ["", f"{title}; †k: k diverged runs at that LR.", "", head, rule]
        for s in res.systems:
            by_lr = {p.lr: p for p in s.points}
            cells = []
            for lr in lrs:
                p = by_lr.get(lr)
                if p is None:
                    cells.append("")
                    continue
                vals = getattr(p, attr)
                if attr != "max_attn_logit":  # the loss and BLEU of diverged runs are not shown
                    vals = [v for v, div in zip(vals, p.diverged) if not div]
                cells.append(_cell(vals, p.n_diverged, spec))
            lines.append(f"| {s.system} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "LR sensitivity = mean over LRs of min(final dev loss, loss at initialization) minus "
        f"its minimum over LRs ({CITATION}); per seed, then averaged. Diverged: training "
        "stopped on non-finite values, or the final dev loss is above the loss at "
        "initialization (the dev loss of the same seed's model before training, measured "
        "by a one-update run at learning rate 0). Best LR: lowest mean over seeds of "
        "min(final dev loss, loss at initialization).",
    ]
    return "\n".join(lines) + "\n"


def write_lr_sweep_report(res: LRSweepResult, out_dir, stem: str = "lr_sweep") -> dict[str, str]:
    """Write ``STEM.md`` (:func:`lr_sweep_markdown`) and ``STEM.json`` (the result).

    Returns:
        ``{"md": path, "json": path}``.
    """
    return write_markdown_and_json(out_dir, stem, lr_sweep_markdown(res), res.to_json())
