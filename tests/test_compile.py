"""``--torch-compile`` of the task ``translation_word_dropout``: the compiled model's loss and
gradients equal the eager model's on real (toy) batches of different shapes, new shapes do not
recompile once the first batches compiled (dynamic shapes), decoding stays eager and equal."""

import os

import pytest
import torch

from fairseq_qknorm.tasks import translation_word_dropout  # noqa: F401  (registers the task)

from conftest import PLUGIN_DIR, tiny_model

# inductor compiles C++ kernels for every graph: 3 minutes (184 s) for this tiny model on an idle
# 2-core Zen 4 (2026-12-02, passed), more than 25 minutes on the 2-core machine under load where
# it was written (it did not finish there), so it runs only when asked: QKNORM_TEST_COMPILE=1
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("QKNORM_TEST_COMPILE") != "1",
        reason="torch.compile test: set QKNORM_TEST_COMPILE=1 (minutes of inductor compilation)",
    ),
]


def _task_and_model(bin_dir, compile_on):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [str(bin_dir), "--user-dir", str(PLUGIN_DIR), "--task", "translation_word_dropout",
            "--arch", "transformer_qknorm_paper", "--qk-norm-length", "12",
            *tiny_model(layers=1, dim=16, dropout=0), "--criterion",
            "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]  # fmt: skip
    if compile_on:
        argv.append("--torch-compile")
    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), argv)
    )
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model = task.build_model(cfg.model)
    return task, model, task.build_criterion(cfg.criterion)


def test_compiled_equals_eager_without_recompiling_per_batch(toy_data):
    from torch._dynamo.utils import counters

    _, bin_dir = toy_data
    task, eager, crit = _task_and_model(bin_dir, False)
    _, compiled, _ = _task_and_model(bin_dir, True)
    compiled.load_state_dict(eager.state_dict())
    assert compiled._compiled_call_impl is not None  # nn.Module.compile: in place
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoint keys unchanged
    task.load_dataset("valid")
    itr = task.get_batch_iterator(
        task.dataset("valid"), max_tokens=60, max_positions=(1024, 1024), seed=1
    ).next_epoch_itr(shuffle=False)
    batches = [next(itr) for _ in range(4)]
    shapes = {(b["net_input"]["src_tokens"].shape, b["target"].shape) for b in batches}
    assert len(shapes) >= 3  # different shapes: the dynamic-shape case
    graphs = []
    for sample in batches:
        losses, grads = [], []
        for m in (eager, compiled):
            m.train()
            m.zero_grad()
            loss, _, _ = crit(m, sample)
            loss.backward()
            losses.append(loss.detach())
            grads.append([p.grad.clone() for p in m.parameters()])
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-4)
        for g_c, g_e in zip(grads[1], grads[0]):
            # float32 tolerance: inductor fuses and reorders the reductions
            torch.testing.assert_close(
                g_c, g_e, rtol=1e-3, atol=1e-4 * float(g_e.abs().max()) + 1e-6
            )
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] > 0  # it did compile
    # batches of new shapes after the second: no new graphs (not one compilation per batch)
    assert graphs[3] - graphs[1] <= 2, graphs
    # validation forward (eval mode) equal too
    eager.eval()
    compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            crit(compiled, batches[0])[0], crit(eager, batches[0])[0], rtol=1e-5, atol=1e-4
        )
    # decoding: SequenceGenerator calls the (eager) encoder/decoder: same hypotheses
    gen = task.build_generator([eager], argparse_beam())
    out_e = task.inference_step(gen, [eager], batches[0])
    out_c = task.inference_step(task.build_generator([compiled], argparse_beam()), [compiled],
                                batches[0])  # fmt: skip
    assert [h[0]["tokens"].tolist() for h in out_c] == [h[0]["tokens"].tolist() for h in out_e]


def argparse_beam():
    from argparse import Namespace

    return Namespace(beam=2, max_len_a=0, max_len_b=12, min_len=1)
