"""``fairseq-train`` in this process, then its peak CUDA memory: ``peak_cuda_memory_gib=X``.

Used by ``benchmarks/gpu_check.sh`` (``python -m benchmarks.gpu_train FAIRSEQ_TRAIN_ARGS...``):
``torch.cuda.max_memory_allocated()`` after fairseq's ``cli_main`` returns (GiB = 2**30 bytes;
tensors only, not the caching allocator's reserve). Exit status: fairseq's.
"""

import sys


def main(argv=None) -> int:
    """Run fairseq-train with ``argv``; print the peak line (CUDA only); return 0."""
    import torch
    from fairseq_cli import train

    sys.argv = ["fairseq-train", *(sys.argv[1:] if argv is None else argv)]
    train.cli_main()
    if torch.cuda.is_available():
        print(f"peak_cuda_memory_gib={torch.cuda.max_memory_allocated() / 2**30:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
