"""Packaging: fairseq_qknorm (a fairseq ``--user-dir`` plugin), qknorm_model_tools, qknorm_tools.

Three layers, each importing only those below it:

* ``fairseq_qknorm``: the plugin (models, modules, tasks, criterion, ``--bpe pipeline``); imports
  only torch, fairseq and itself;
* ``qknorm_model_tools``: the tools that build, load or run the models (translate, attention
  dump, checkpoint averaging, the bf16 decision and its timing); torch, fairseq, the plugin and
  qknorm_tools;
* ``qknorm_tools``: the experiment tooling (configuration, scoring, significance, tables,
  figures, corpus checks); needs neither torch nor fairseq.

``tests/test_layers.py`` checks these imports.

torch is deliberately *not* listed in ``install_requires``: an unpinned torch
requirement makes pip pull a multi-GB CUDA build on CPU machines. Install torch
first (``make install`` pins ``torch==2.13.0``), then this package.

fairseq is not listed either, because two distributions provide the ``fairseq``
module on Python 3.11 (``ve-fairseq`` wheels, ``fairseq-fixed`` sdist) and the
official ``fairseq==0.12.2`` cannot be imported there; pick one with the extras
below (``pip install -e .[fairseq]``) or install your own build first.
"""

from setuptools import find_packages, setup

setup(
    name="fairseq_qknorm",
    version="0.1.0",
    description=(
        "fairseq plugin: Query-Key Normalization (Henry et al., 2020) and "
        "Transformers without Tears (Nguyen & Salazar, 2019) for low-resource NMT"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",  # tomllib (qknorm_tools/config.py)
    packages=find_packages(
        include=["fairseq_qknorm", "fairseq_qknorm.*", "qknorm_model_tools", "qknorm_tools"]
    ),
    # the report page's own script, inlined into each page (qknorm_tools/report.py)
    package_data={"qknorm_tools": ["report.js"]},
    install_requires=[
        "sacrebleu>=2.3,<3",
        "sacremoses>=0.1",
        "subword-nmt>=0.3.8",
        "numpy",
        "matplotlib>=3.5",
        # seed-level CIs, power, MDE and TOST of the ablation (qknorm_tools/power.py)
        "scipy",
        "statsmodels>=0.14",
    ],
    extras_require={
        # prebuilt wheels (cp311/cp312) of upstream fairseq main + Python 3.11 fix
        "fairseq": ["ve-fairseq==0.12.3"],
        "spm": ["sentencepiece>=0.1.99"],
        "tensorboard": ["tensorboard"],
        # pytest-xdist: make test runs the suite in TEST_WORKERS processes, a test file per process
        "test": ["pytest>=7", "pytest-xdist>=3.5", "ruff==0.17.6"],
        # the interactive HTML report (python -m qknorm_tools.report; plotly.js is inlined)
        "report": ["plotly>=5.0"],
    },
    license="MIT",
)
