"""Run a command and write its peak RSS (``os.wait4`` ``ru_maxrss``) to a JSON file.

    python -S benchmarks/rusage_launcher.py OUT.json CMD [ARGS...]

Linux carries a process's high-water RSS across ``exec`` (the signal struct's ``maxrss``),
so a child spawned directly by the (large) benchmark process would report at least the
benchmark's own footprint. This launcher is tiny (stdlib only, no site): the command it
forks and execs inherits only the launcher's few MiB. Exit status = the command's.
"""

import json
import os
import sys


def main() -> int:
    """Run ``argv[2:]``, write its peak RSS to ``argv[1]``; the command's exit status.

    Stdlib only (``python -S``), so the usage error's status 2 is written here, not taken from
    :mod:`qknorm_tools.exits`; any other status is the command's own.
    """
    if len(sys.argv) < 3:
        print(
            "usage: python -S benchmarks/rusage_launcher.py OUT.json CMD [ARGS...]", file=sys.stderr
        )
        return 2
    out, cmd = sys.argv[1], sys.argv[2:]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - replaced by exec
        try:
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            print(f"rusage_launcher: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    with open(out, "w") as f:
        json.dump(
            {
                "maxrss_kb": ru.ru_maxrss,
                "utime_s": ru.ru_utime,
                "stime_s": ru.ru_stime,
                "status": status,
            },
            f,
        )
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
