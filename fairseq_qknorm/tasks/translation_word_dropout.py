r"""``translation_word_dropout``: fairseq's ``translation`` task plus two training options.

Both are off by default: word dropout (``--word-dropout P``) and bf16 autocast on CPU
(``--bf16-autocast``, with ``--bf16-autocast-inference`` for decoding). It also applies the
model's QK-clip (``--qk-clip TAU`` of ``transformer_qknorm``) after each optimizer step
(:meth:`TranslationWordDropoutTask.optimizer_step`), logged as ``qk_clip`` (heads rescaled).

Identical to fairseq's :class:`~fairseq.tasks.translation.TranslationTask` except:

* **word dropout**: :meth:`TranslationWordDropoutTask.train_step` replaces each non-special
  token of the model *inputs* ``net_input.src_tokens`` and ``net_input.prev_output_tokens`` by
  ``<unk>`` with probability ``--word-dropout P`` before the forward pass. Special symbols
  (``<s>``, ``<pad>``, ``</s>``, ``<unk>``: indices below ``Dictionary.nspecial``) are never
  replaced; the target (``sample["target"]``, what the loss is computed on) is never changed;
  validation (``valid_step``, including ``--eval-bleu``), ``fairseq-generate`` and
  ``fairseq-interactive`` see the data unchanged.
* **bf16 autocast** (:mod:`.cpu_bf16`): with ``--bf16-autocast`` the forward pass and loss of
  ``train_step`` (the backward runs outside autocast) and all of ``valid_step`` (dev loss and
  its ``--eval-bleu`` decoding) run under ``torch.autocast("cpu", dtype=torch.bfloat16)``;
  ``--bf16-autocast-inference`` does the same for ``inference_step`` (``fairseq-generate``,
  ``fairseq-interactive``, the hub's ``translate``). Parameters, gradients and the optimizer
  stay float32. fairseq's ``--bf16`` is TPU-only and is not used. Both options are refused on
  a CPU without native bf16 (:func:`.cpu_bf16.native_bf16_support`) unless
  ``--bf16-autocast-allow-emulated``.

Sources
-------
* Nguyen & Salazar (2019), *Transformers without Tears: Improving the Normalization of
  Self-Attention*, IWSLT 2019 (arXiv:1910.05895), Sec. 4: "word dropout 0.1" in every
  low-resource experiment, implemented in the authors' code by replacing source and target
  input tokens with UNK.
* Sennrich, Haddow & Birch (2016), *Edinburgh Neural Machine Translation Systems for WMT 16*:
  dropout of entire words (their embeddings set to zero) in NMT, following
* Gal & Ghahramani (2016), *A Theoretically Grounded Application of Dropout in Recurrent Neural
  Networks* (word-level dropout). Replacing by ``<unk>`` (as TWT does) instead of zeroing the
  embedding keeps the input distribution of the model's UNK embedding meaningful.

Reproducibility: the mask of a batch is drawn from a ``torch.Generator`` seeded from
(``--seed``, update number, micro-batch index within the update, data-parallel rank), so a
resumed run (fairseq restarts at an update boundary) draws the same masks as an uninterrupted
one, independently of the global torch RNG (which dropout layers consume).

Use::

    fairseq-train DATA --user-dir /abs/path/fairseq_qknorm \
        --task translation_word_dropout --word-dropout 0.1 ...
    fairseq-train DATA --user-dir /abs/path/fairseq_qknorm --cpu \
        --task translation_word_dropout --bf16-autocast ...

Decoding a checkpoint trained with this task works with ``--task translation`` (the model is
unchanged, its parameters float32 whatever the options). ``fairseq-generate`` and
``fairseq-interactive`` build the task from their own command line, never from the
checkpoint, so options stored in it do not apply there (``--task translation_word_dropout``
decodes in fp32 unless ``--bf16-autocast-inference`` is given). fairseq's hub interface and
``fairseq-validate`` restore the checkpoint's task (they need the plugin imported: ``import
fairseq_qknorm``) with its stored options; there the bf16 options are kept where the CPU has
native bf16 and switched off with a warning where it has not (never refused), and
``--model-overrides "{'bf16_autocast': False}"`` switches them off (fp32 dev loss from
``fairseq-validate``).
"""

import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.data import LanguagePairDataset, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from ..data import batching as bucketing
from . import cpu_bf16

logger = logging.getLogger(__name__)


@dataclass
class TranslationWordDropoutConfig(TranslationConfig):
    """fairseq's ``TranslationConfig`` plus ``--word-dropout`` and the bf16 autocast options."""

    word_dropout: float = field(
        default=0.0,
        metadata={
            "help": "word dropout probability P: in training only, each non-special token of "
            "the source and of the decoder input (prev_output_tokens) is replaced by <unk> "
            "with probability P; targets untouched (Nguyen & Salazar 2019, Sec. 4: 0.1)"
        },
    )
    bf16_autocast: bool = field(
        default=False,
        metadata={
            "help": "CPU bf16 training: run train_step's forward pass and loss (backward "
            "outside) and valid_step (dev loss, --eval-bleu) under torch.autocast('cpu', "
            "bfloat16); parameters and optimizer stay fp32 (do not combine with fairseq's "
            "TPU-only --bf16). Refused without native bf16 (avx512_bf16/amx_bf16/ARM bf16)"
        },
    )
    bf16_autocast_inference: bool = field(
        default=False,
        metadata={
            "help": "run inference_step (fairseq-generate, fairseq-interactive, hub "
            "translate) under torch.autocast('cpu', bfloat16); off: decoding in fp32"
        },
    )
    bf16_autocast_allow_emulated: bool = field(
        default=False,
        metadata={
            "help": "accept --bf16-autocast/--bf16-autocast-inference on a CPU without "
            "native bf16 (emulated bf16: much slower than fp32)"
        },
    )
    batching: ChoiceEnum(["fairseq", "bucketed"]) = field(
        default="fairseq",
        metadata={
            "help": "training-split batching: 'fairseq' = fairseq's --max-tokens batching; "
            "'bucketed' = the same sentences in batches of similar source AND target length "
            "(same padded-size budget, rebuilt each epoch from --seed, padding fraction "
            "logged once per epoch; fairseq_qknorm/data/batching.py)"
        },
    )
    bf16_autocast_cuda: bool = field(
        default=False,
        metadata={
            "help": "GPU bf16 training: train_step's forward pass and loss and valid_step "
            "under torch.autocast('cuda', bfloat16), parameters and optimizer fp32 (fairseq's "
            "--bf16 is TPU-only); refused when the model is not on a CUDA device"
        },
    )
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "train with torch.compile(model, dynamic=True) (training and validation "
            "forward; generation uses the eager model); compile time logged"
        },
    )
    # the run's --seed (fairseq's common.seed), for the word-dropout masks
    seed: int = II("common.seed")


def word_dropout(
    tokens: torch.Tensor,
    p: float,
    unk: int,
    nspecial: int,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Return a copy of ``tokens`` with each regular token replaced by ``unk`` with prob. ``p``.

    Regular tokens are those ``>= nspecial``; special symbols, including padding and EOS, are
    never replaced.

    :param tokens: integer tensor of token indices, any shape (e.g. ``(batch, length)``).
    :param p: replacement probability in ``[0, 1]``; ``p == 1`` replaces every regular token.
    :param unk: index of ``<unk>`` in the dictionary.
    :param nspecial: number of special symbols (``Dictionary.nspecial``: indices ``0 ..
        nspecial-1`` are ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` and any extra specials).
    :param generator: CPU ``torch.Generator`` for the mask (the mask is drawn on the CPU and
        moved to ``tokens.device``, so the result does not depend on the device).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"word dropout probability must be in [0, 1], got {p}")
    if p == 0.0 or tokens.numel() == 0:
        return tokens.clone()
    # (same shape as tokens) uniform [0, 1) draws: < p with probability p, always for p == 1
    drop = torch.rand(tokens.shape, generator=generator) < p
    drop = drop.to(tokens.device) & (tokens >= nspecial)
    return tokens.masked_fill(drop, unk)


def _mask_seed(*parts: int) -> int:
    """Well-mixed 63-bit seed from non-negative integers (numpy SeedSequence hashing)."""
    state = np.random.SeedSequence([int(x) for x in parts]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


class CudaBf16AutocastCriterion:
    """``criterion(model, sample)`` (forward pass and loss) under CUDA bf16 autocast.

    The GPU twin of :class:`.cpu_bf16.Bf16AutocastCriterion` (``--bf16-autocast-cuda``):
    ``torch.autocast("cuda", dtype=torch.bfloat16)``; the backward runs outside it.

    Raises:
        ValueError: the model is not on a CUDA device (CUDA autocast would do nothing).
    """

    def __init__(self, criterion, model):
        p = next(model.parameters(), None)
        if p is None or p.device.type != "cuda":
            raise ValueError(
                "--bf16-autocast-cuda needs the model on a CUDA device, got "
                f"{None if p is None else p.device} (on a CPU use --bf16-autocast)"
            )
        self.criterion = criterion

    def __call__(self, model, sample):
        """The wrapped criterion's ``(loss, sample_size, logging_output)`` in CUDA bf16."""
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.criterion(model, sample)


def bucketing_seed(seed: int, epoch: int) -> int:
    """Seed of epoch ``epoch``'s bucketed batches: a hash of (``--seed``, epoch)."""
    return _mask_seed(seed, epoch, 0x42A7)


@register_task("translation_word_dropout", dataclass=TranslationWordDropoutConfig)
class TranslationWordDropoutTask(TranslationTask):
    """Fairseq's ``translation`` task with word dropout and optional bf16 autocast on CPU.

    Word dropout on the model inputs in ``train_step`` only and optional bf16 autocast on CPU (see
    the module docstring for sources and what is and is not changed).
    """

    cfg: TranslationWordDropoutConfig

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        """Fairseq's ``setup_task``, after checking for native bf16 if a bf16 option is on.

        A task built from a checkpoint (``from_checkpoint=True``: the hub interface,
        ``fairseq-validate``) is never refused: its stored bf16 options are switched off with a
        warning on a CPU without native bf16, so a checkpoint decodes anywhere.

        Raises:
            ValueError: a bf16 autocast option on a CPU without native bf16 (from
                :func:`.cpu_bf16.check_native_bf16`), unless ``--bf16-autocast-allow-emulated``.
        """
        asked = [
            name
            for name, on in (
                ("--bf16-autocast", getattr(cfg, "bf16_autocast", False)),
                ("--bf16-autocast-inference", getattr(cfg, "bf16_autocast_inference", False)),
            )
            if on
        ]
        if asked:
            if kwargs.get("from_checkpoint", False):
                native, reason = cpu_bf16.native_bf16_support()
                if not native and not getattr(cfg, "bf16_autocast_allow_emulated", False):
                    logger.warning(
                        "%s stored in the checkpoint switched off: %s", " and ".join(asked), reason
                    )
                    cfg.bf16_autocast = cfg.bf16_autocast_inference = False
            else:
                cpu_bf16.check_native_bf16(
                    asked, bool(getattr(cfg, "bf16_autocast_allow_emulated", False))
                )
        return super().setup_task(cfg, **kwargs)

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.word_dropout_p = float(getattr(cfg, "word_dropout", 0.0) or 0.0)
        if not 0.0 <= self.word_dropout_p <= 1.0:
            raise ValueError(f"--word-dropout must be in [0, 1], got {self.word_dropout_p}")
        try:
            self._wd_seed = int(getattr(cfg, "seed", 1))
        except (TypeError, ValueError):  # unresolved interpolation outside fairseq-train
            self._wd_seed = 1
        self._wd_update = None  # update number of the previous train_step call
        self._wd_micro = 0  # micro-batch index within that update (--update-freq > 1)
        if self.word_dropout_p > 0:
            logger.info(
                "word dropout: p = %g on src_tokens and prev_output_tokens (training "
                "only), replacement <unk>, seed %d",
                self.word_dropout_p,
                self._wd_seed,
            )
        self.bf16_autocast = bool(getattr(cfg, "bf16_autocast", False))
        self.bf16_autocast_inference = bool(getattr(cfg, "bf16_autocast_inference", False))
        self._bf16_on_cpu = False  # require_cpu passed once (the model does not move)
        if self.bf16_autocast:
            logger.info(
                "bf16 autocast: train_step forward + loss (backward outside) and "
                "valid_step under torch.autocast('cpu', bfloat16); parameters, "
                "gradients and optimizer fp32"
            )
        if self.bf16_autocast_inference:
            logger.info("bf16 autocast: inference_step under torch.autocast('cpu', bfloat16)")

    def build_model(self, cfg, from_checkpoint=False):
        """Fairseq's ``build_model``; with ``--torch-compile`` the model's ``__call__`` compiled.

        ``model.compile(dynamic=True)`` (``torch.nn.Module.compile``: in place, so parameter
        names, checkpoints and the optimizer are unchanged) compiles what ``model(**net_input)``
        runs: the training and validation forward passes. fairseq's ``SequenceGenerator`` calls
        ``model.encoder`` / ``model.decoder`` methods directly, so decoding (``--eval-bleu``,
        ``fairseq-generate``) stays eager. Compilation happens in the first forward pass;
        :meth:`train_step` logs its time.
        """
        model = super().build_model(cfg, from_checkpoint=from_checkpoint)
        if getattr(self.cfg, "torch_compile", False) and not from_checkpoint:
            model.compile(dynamic=True)
            logger.info(
                "torch.compile: model forward compiled (dynamic=True, backend inductor); "
                "decoding eager"
            )
        return model

    def get_batch_iterator(self, dataset, max_tokens=None, max_sentences=None, **kwargs):
        """Fairseq's ``get_batch_iterator``; ``--batching bucketed`` batches the training split.

        The training split (``--train-subset``) is batched by
        :func:`fairseq_qknorm.data.batching.bucketed_batches`: exactly the sentences that
        fairseq's own batching of that epoch keeps (same ``--max-positions`` filtering, same
        ``--max-tokens``/``--batch-size``/``--required-batch-size-multiple``, fairseq's drop of
        a last incomplete batch included), regrouped by source and target length. The batches
        are rebuilt each epoch (a callable ``batch_sampler``: tie-breaking seeded by ``--seed``
        and the epoch), and fairseq's ``EpochBatchIterator`` shuffles their order by ``--seed +
        epoch`` as usual; the padding fraction is logged once per epoch. Other splits and
        ``--batching fairseq`` go to fairseq unchanged.

        Raises:
            ValueError: ``--batching bucketed`` on a dataset that is not a
                ``LanguagePairDataset`` with target sizes.
        """
        train = self.datasets.get(getattr(self.cfg, "train_subset", "train"))
        if getattr(self.cfg, "batching", "fairseq") != "bucketed" or dataset is not train:
            return super().get_batch_iterator(
                dataset, max_tokens=max_tokens, max_sentences=max_sentences, **kwargs
            )
        if not isinstance(dataset, LanguagePairDataset) or dataset.tgt_sizes is None:
            raise ValueError(
                "--batching bucketed needs a translation dataset with targets, got "
                f"{type(dataset).__name__}"
            )
        disable_cache = kwargs.get("disable_iterator_cache", False) or kwargs.get(
            "update_epoch_batch_itr", False
        )
        if not disable_cache and dataset in self.dataset_to_epoch_iter:
            return self.dataset_to_epoch_iter[dataset]
        seed = kwargs.get("seed", 1)
        epoch = kwargs.get("epoch", 1)
        dataset.set_epoch(epoch)
        # fairseq's own batches of this epoch (what super() would freeze): their sentences
        fairseq_batches = self._fairseq_batches(dataset, max_tokens, max_sentences, epoch, kwargs)
        kept = np.sort(np.concatenate([np.asarray(b, dtype=np.int64) for b in fairseq_batches]))
        src_sizes, tgt_sizes = dataset.src_sizes, dataset.tgt_sizes
        before = bucketing.padding_stats(fairseq_batches, src_sizes, tgt_sizes)

        def make_batches(ds, ep):
            batches, width = bucketing.bucketed_batches(
                kept,
                src_sizes,
                tgt_sizes,
                max_tokens,
                max_sentences,
                kwargs.get("required_batch_size_multiple", 1),
                seed=bucketing_seed(seed, ep),
            )
            after = bucketing.padding_stats(batches, src_sizes, tgt_sizes)
            logger.info(
                "bucketed batching: epoch %d: %s, bucket width %d; fairseq's batching: %.1f%%",
                ep,
                after.describe(),
                width,
                100 * before.fraction,
            )
            return batches

        epoch_iter = iterators.EpochBatchIterator(
            dataset=dataset,
            collate_fn=dataset.collater,
            batch_sampler=make_batches,
            seed=seed,
            num_shards=kwargs.get("num_shards", 1),
            shard_id=kwargs.get("shard_id", 0),
            num_workers=kwargs.get("num_workers", 0),
            epoch=epoch,
            buffer_size=kwargs.get("data_buffer_size", 0),
            skip_remainder_batch=kwargs.get("skip_remainder_batch", False),
            grouped_shuffling=kwargs.get("grouped_shuffling", False),
            reuse_dataloader=getattr(self.cfg, "reuse_dataloader", True),
            persistent_workers=getattr(self.cfg, "persistent_workers", True),
        )
        if not disable_cache:
            self.dataset_to_epoch_iter[dataset] = epoch_iter
        return epoch_iter

    def _fairseq_batches(self, dataset, max_tokens, max_sentences, epoch, kwargs):
        """The batches fairseq's ``get_batch_iterator`` makes for ``epoch`` (its make_batches)."""
        from fairseq.data import data_utils

        with data_utils.numpy_seed(kwargs.get("seed", 1) + epoch):
            indices = dataset.ordered_indices()
        if kwargs.get("max_positions") is not None:
            indices = self.filter_indices_by_size(
                indices,
                dataset,
                kwargs["max_positions"],
                kwargs.get("ignore_invalid_inputs", False),
            )
        return dataset.batch_by_size(
            indices,
            max_tokens=max_tokens,
            max_sentences=max_sentences,
            required_batch_size_multiple=kwargs.get("required_batch_size_multiple", 1),
        )

    def _generator(self, update_num: int) -> torch.Generator:
        if update_num != self._wd_update:
            self._wd_update, self._wd_micro = update_num, 0
        else:
            self._wd_micro += 1
        rank = (
            torch.distributed.get_rank()
            if (torch.distributed.is_available() and torch.distributed.is_initialized())
            else 0
        )
        g = torch.Generator()
        g.manual_seed(_mask_seed(self._wd_seed, update_num, self._wd_micro, rank))
        return g

    def apply_word_dropout(self, sample, update_num: int):
        """A shallow copy of ``sample`` with word dropout on its model inputs.

        Its ``net_input.src_tokens`` and ``net_input.prev_output_tokens`` went through
        :func:`word_dropout`; ``sample`` itself and ``sample["target"]`` are not modified. Returns
        ``sample`` when P = 0 or the batch is empty (fairseq's dummy batches).
        """
        p = self.word_dropout_p
        if p <= 0 or not sample or "net_input" not in sample:
            return sample
        g = self._generator(update_num)
        net_input = dict(sample["net_input"])
        net_input["src_tokens"] = word_dropout(
            net_input["src_tokens"], p, self.src_dict.unk(), self.src_dict.nspecial, g
        )
        if net_input.get("prev_output_tokens") is not None:
            net_input["prev_output_tokens"] = word_dropout(
                net_input["prev_output_tokens"], p, self.tgt_dict.unk(), self.tgt_dict.nspecial, g
            )
        out = dict(sample)
        out["net_input"] = net_input
        return out

    def _check_cpu(self, models) -> None:
        if not self._bf16_on_cpu:
            cpu_bf16.require_cpu(models)
            self._bf16_on_cpu = True

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """Fairseq's ``train_step`` on :meth:`apply_word_dropout` of the batch.

        With ``--bf16-autocast`` its ``criterion(model, sample)`` call (forward pass and loss) runs
        under bf16 autocast (:class:`.cpu_bf16.Bf16AutocastCriterion`), its backward outside.

        Raises:
            ValueError: ``--bf16-autocast`` with the model not on the CPU.
        """
        if self.bf16_autocast:
            self._check_cpu([model])
            criterion = cpu_bf16.Bf16AutocastCriterion(criterion)
        # tells a --qk-clip model that its clip runs (optimizer_step); it refuses to train
        # without it
        getattr(model, "module", model).qk_clip_hooked = True
        if getattr(self.cfg, "bf16_autocast_cuda", False):
            criterion = CudaBf16AutocastCriterion(criterion, model)

        def step():
            return super(TranslationWordDropoutTask, self).train_step(
                self.apply_word_dropout(sample, update_num),
                model,
                criterion,
                optimizer,
                update_num,
                ignore_grad=ignore_grad,
            )

        if getattr(self.cfg, "torch_compile", False):
            return self._timed_compiled_step(step, update_num)
        return step()

    def _timed_compiled_step(self, step, update_num):
        """``step()`` timed; logs the step's wall time when torch.compile compiled in it."""
        import time

        from torch._dynamo.utils import counters

        graphs = counters["stats"]["unique_graphs"]
        t0 = time.perf_counter()
        out = step()
        new = counters["stats"]["unique_graphs"] - graphs
        if new:
            logger.info(
                "torch.compile: update %d compiled %d graph(s) (%d in all) in a step of %.1f s",
                update_num,
                new,
                counters["stats"]["unique_graphs"],
                time.perf_counter() - t0,
            )
        return out

    def valid_step(self, sample, model, criterion):
        """Fairseq's ``valid_step``, under bf16 autocast with ``--bf16-autocast``.

        Both the dev loss and the ``--eval-bleu`` decoding run under it.
        """
        if self.bf16_autocast:
            self._check_cpu([model])
        if getattr(self.cfg, "bf16_autocast_cuda", False):
            criterion = CudaBf16AutocastCriterion(criterion, model)
        with cpu_bf16.bf16_autocast(self.bf16_autocast):
            return super().valid_step(sample, model, criterion)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Fairseq's ``inference_step``, under bf16 autocast with ``--bf16-autocast-inference``.

        Otherwise unchanged: inside ``valid_step`` it keeps ``--bf16-autocast``'s autocast.
        """
        if self.bf16_autocast_inference:
            self._check_cpu(models)
        with cpu_bf16.bf16_autocast(self.bf16_autocast_inference):
            return super().inference_step(
                generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
            )

    def optimizer_step(self, optimizer, model, update_num):
        """Fairseq's ``optimizer.step()``, then QK-clip (:meth:`apply_qk_clip_after_step`)."""
        super().optimizer_step(optimizer, model, update_num)
        self.apply_qk_clip_after_step(model)

    @staticmethod
    def apply_qk_clip_after_step(model) -> int:
        """QK-clip of the model (``--qk-clip TAU``) after its optimizer step.

        Calls the model's ``apply_qk_clip`` (``transformer_qknorm``; a DDP wrapper's
        ``module`` is unwrapped) and logs the number of heads rescaled as ``qk_clip`` (summed
        over the log interval), only when it fires. Models without QK-clip: nothing, 0.
        """
        inner = getattr(model, "module", model)
        apply = getattr(inner, "apply_qk_clip", None)
        if apply is None:
            return 0
        clipped = int(apply())
        if clipped:
            metrics.log_scalar_sum("qk_clip", clipped, priority=5)
        return clipped
