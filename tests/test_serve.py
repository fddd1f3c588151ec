"""qknorm_tools.serve: the one Python process of train.sh and evaluate.sh (issue 36).

In process: each request answers what ``python -m qknorm_tools.MODULE ARGS`` prints and
returns; a malformed request stops it with exit 1 naming the request. Through bash
(scripts/lib/proc.sh: qk_spine_start, qk_py): the coprocess gives the same answers as a
Python start of its own, trailing newlines removed as $(...) removes them, and ends with the
script. (The Python starts of the scripts themselves: tests/test_run.py, tests/test_freshness.py.)
"""

import io
import subprocess

from qknorm_tools import serve

from conftest import FAR_BOUND, REPO, cli_env


def _request(*args: str) -> bytes:
    return f"{len(args)}\n".encode() + b"".join(a.encode() + b"\0" for a in args)


def _answers(data: bytes) -> list[tuple[str, int]]:
    parts, answers = data.split(b"\0"), []
    for body, rest in zip(parts, parts[1:]):
        status, _, _ = rest.partition(b"\n")
        answers.append((body.decode(), int(status)))
    return answers


def _fix(answers):
    """Each answer's body follows the previous answer's status line: leave that line out."""
    return [(b.split("\n", 1)[1] if i else b, s) for i, (b, s) in enumerate(answers)]


def test_each_request_answers_what_its_command_line_prints_and_returns(tmp_path, capsys):
    record = tmp_path / "made_by.json"
    requests = io.BytesIO(
        _request("freshness", "write", str(record), "--set", "beam=4")
        + _request("freshness", "check", str(record), "--set", "beam=5")
        + _request("freshness", "check", str(record), "--set", "beam=4")
        + _request("freshness", "--bogus")
        + _request("nosuch", "x")
    )
    reply = io.BytesIO()
    assert serve.serve(requests, reply=reply) == 0
    answers = _fix(_answers(reply.getvalue()))
    assert answers == [("", 0), ("beam 4 -> 5\n", 3), ("", 0), ("", 2), ("", 2)]
    err = capsys.readouterr().err
    assert "qknorm_tools.freshness: error: the following arguments are required: cmd" in err
    assert "error: a request names one of run, collect, evaluate, freshness, not ['nosuch']" in err


def test_a_malformed_request_stops_it_naming_the_request(capsys):
    requests = io.BytesIO(b"2\nfreshness\0")  # one argument of two
    assert serve.serve(requests, name="requests.bin", reply=io.BytesIO()) == 1
    assert capsys.readouterr().err == (
        "error: requests.bin: request 1: the request ended after 1 of its 2 arguments\n"
    )
    assert serve.serve(io.BytesIO(b"x\n"), reply=io.BytesIO()) == 1
    assert "request 1: the count line 'x\\n' is not a number" in capsys.readouterr().err


SCRIPT = r"""
set -euo pipefail
source "$REPO/scripts/lib.sh"
qk_spine_start
rec="$T/made_by.json"
qk_py freshness write "$rec" --set "a=x y" && echo "write [$QK_PY_OUT]"
rc=0; qk_py freshness check "$rec" --set "a=x  z" || rc=$?
echo "check $rc [$QK_PY_OUT]"
rc=0; qk_py run options "--repo=$REPO" "uint:--seed=x" || rc=$?
echo "options $rc [$QK_PY_OUT]"
echo "spine $QK_SPINE_PID"
"""


def test_qk_py_asks_the_scripts_coprocess_as_it_would_a_python_start(tmp_path):
    env = cli_env()
    env.update(REPO=str(REPO), T=str(tmp_path))
    p = subprocess.run(["bash", "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=FAR_BOUND)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:3] == [
        "write []",
        "check 3 [a x y -> x  z]",
        "options 2 [--seed must be a non-negative integer (no leading zeros, below 10^9), got 'x']",
    ], p.stdout
    pid = int(lines[3].split()[1])
    # the script has ended: its coprocess saw the end of its requests and ended too
    assert subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode == 1
