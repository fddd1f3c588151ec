"""The scripts' integer options and comma-separated lists (qknorm_tools/script_options.py):
each rule once, in Python; the scripts' messages for bad values (tests/test_grid.py,
tests/test_lr_sweep.py, tests/test_launcher.py, tests/test_gpu_grid.py run them through the
scripts)."""

import pytest

from qknorm_tools import config, run, script_options
from qknorm_tools.exits import UsageError


@pytest.mark.parametrize(
    "text, items",
    [
        ("1,2,3", ["1", "2", "3"]),
        (" 3 , 1", ["3", "1"]),
        ("0", ["0"]),
        ("999999999", ["999999999"]),
    ],
)
def test_seeds_are_distinct_uints_in_order(text, items):
    assert script_options.split_list("seeds", text) == items


@pytest.mark.parametrize(
    "text, message",
    [
        ("1,,2", "bad --seeds list '1,,2' (comma-separated non-negative integers, e.g. 1,2,3)"),
        ("1,", "bad --seeds list '1,' (comma-separated non-negative integers, e.g. 1,2,3)"),
        (",1", "bad --seeds list ',1' (comma-separated non-negative integers, e.g. 1,2,3)"),
        # "1 2" is neither seed 12 nor seeds 1 and 2
        (
            "1 2",
            "bad list '1 2': item '1 2' holds white space; the items are separated by "
            "commas (e.g. 1,2)",
        ),  # fmt: skip
        # seed01 and seed1 would be one fairseq seed counted twice; 10^9 is over the bound
        (
            "01,1",
            "bad --seeds list '01,1': '01' is not a non-negative integer (no leading "
            "zeros, below 10^9; e.g. --seeds 1,2,3)",
        ),  # fmt: skip
        ("1000000000", "bad --seeds list '1000000000': '1000000000' is not a non-negative"),
        ("-1", "bad --seeds list '-1': '-1' is not"),
        # a repeat is a typo, named after every seed is checked
        ("1, 2,1", "bad --seeds list '1, 2,1': 1 is given twice"),
        ("1,1,x", "bad --seeds list '1,1,x': 'x' is not"),
    ],
)
def test_bad_seeds_are_usage_errors_naming_the_list(text, message):
    with pytest.raises(UsageError) as e:
        script_options.split_list("seeds", text)
    assert str(e.value).startswith(message)


def test_other_lists_refuse_repeats_but_gpus_drop_them():
    assert script_options.split_list("lrs", "1e-3, 3e-3") == ["1e-3", "3e-3"]
    with pytest.raises(UsageError, match=r"^bad --lrs list '1e-3,1e-3': 1e-3 is given twice$"):
        script_options.split_list("lrs", "1e-3,1e-3")
    with pytest.raises(UsageError, match=r"^bad --sizes list '128,' \(empty item\)$"):
        script_options.split_list("sizes", "128,")
    assert script_options.split_list("gpus", "0,1,0") == ["0", "1"]
    with pytest.raises(UsageError, match=r"\(comma-separated GPU ids, e.g. 0,1\)$"):
        script_options.split_list("gpus", "0,,1")


def test_names_all_unknown_and_repeats():
    assert script_options.parse_names("systems", "all") == config.names("systems", in_all=True)
    assert "qk_layernorm" not in script_options.parse_names("systems", "all")  # in_all = false
    assert script_options.parse_names("systems", "twt,qk_layernorm") == ["twt", "qk_layernorm"]
    known = " ".join(config.names("systems"))
    with pytest.raises(UsageError) as e:  # an unknown name before the repeat
        script_options.parse_names("systems", "twt,tw,twt")
    assert str(e.value) == (
        f"unknown system 'tw' (known systems: {known}; or 'all'; did you mean 'twt'?)"
    )
    with pytest.raises(UsageError, match="^bad --systems list 'twt,twt': twt is given twice$"):
        script_options.parse_names("systems", "twt,twt")


def test_check_in_order_and_the_command_line(capsys):
    """check() in order; ``python -m qknorm_tools.run options`` prints the lists for bash."""
    assert script_options.check(["uint:--max-update=0", "posint:--jobs=2", "seeds:S=2,1",
                                 "list:lrs:L=1e-3", "names:pairs:P=gl-en"]) == [
        ("S", ("2", "1")), ("L", ("1e-3",)), ("P", ("gl-en",))]  # fmt: skip
    with pytest.raises(UsageError, match=r"^--jobs must be a positive integer, got '0'$"):
        script_options.check(["posint:--jobs=0", "uint:--max-update=00"])  # the first bad one
    with pytest.raises(UsageError, match=r"^--max-update must be a non-negative integer \(no "):
        script_options.check(["uint:--max-update=00", "posint:--jobs=0"])
    assert run.main(["options", "seeds:SEEDS=1,2", "uint:INDEX=3"]) == 0
    assert capsys.readouterr().out == "SEEDS=(1 2)\n"
    assert run.main(["options", "uint:INDEX=x"]) == 2  # the message on stdout, for the script
    assert capsys.readouterr().out.startswith("INDEX must be a non-negative integer")
    assert run.main(["options", "bogus:X=1"]) == 1
    assert "bad SPEC 'bogus:X=1'" in capsys.readouterr().err
