#!/usr/bin/env python3
"""scripts/device_study.sh, the device studies' check on a GPU host, on the CPU: a stand-in
CLI takes the place of dsa-fidelity and writes, for the study and --context it is given, a
CSV into --out plus a stage table on stdout. Writing the committed CSV must pass with one
line a run and its table; one changed byte, or a failing CLI, must fail the check and name
the run; bad arguments exit 2. Standard library; runs under pytest or alone."""

import os
import stat
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "device_study.sh")
COMMITTED = os.path.join(ROOT, "docs", "results", "device-h200")

# $1 is the study; --context and --out follow. MODE: copy (the committed CSV), alter (its
# first byte changed) or fail (exit 3 before writing anything).
STAND_IN = """#!/usr/bin/env bash
study=$1; shift
while [ $# -gt 0 ]; do
  case $1 in --context) context=$2; shift;; --out) out=$2; shift;; esac
  shift
done
echo "$study $context" >> "$LOG"
[ "$MODE" = fail ] && exit 3
csv="$COMMITTED/$study-$context.csv"
if [ "$MODE" = alter ]; then
  { printf 'X'; tail -c +2 "$csv"; } > "$out/$study.csv"
else
  cp "$csv" "$out/$study.csv"
fi
echo "device time per stage (stand-in):"
echo "  keys [builtin-fast]  1 calls  0.100 ms  50.0% of roofline (memory)  (dominant)"
echo "study wall time 1.0 s"
"""


def check(mode, *extra):
    with tempfile.TemporaryDirectory() as tmp:
        cli = os.path.join(tmp, "dsa-fidelity")
        with open(cli, "w") as f:
            f.write(STAND_IN)
        os.chmod(cli, stat.S_IRWXU)
        log = os.path.join(tmp, "calls.txt")
        env = dict(os.environ, MODE=mode, LOG=log, COMMITTED=COMMITTED)
        done = subprocess.run(["bash", SCRIPT, cli, os.path.join(tmp, "out"), *extra],
                              capture_output=True, text=True, env=env)
        calls = open(log).read().split("\n")[:-1] if os.path.exists(log) else []
        return done.returncode, done.stdout, calls


def test_committed_csvs_pass_and_each_run_prints_its_table():
    code, out, calls = check("copy")
    assert code == 0, out
    assert calls == ["sweep 128k", "needle 128k"] * 2
    for name in ("sweep-128k-1", "needle-128k-1", "sweep-128k-2", "needle-128k-2"):
        assert f"{name}: " in out and "CSV equal to" in out.split(f"{name}: ")[1].split("\n")[0], out
    assert out.count("(dominant)") == 4 and out.count("study wall time") == 4


def test_the_1m_rows_run_once_after_the_128k_rounds():
    code, out, calls = check("copy", "1m")
    assert code == 0, out
    assert calls == ["sweep 128k", "needle 128k"] * 2 + ["sweep 1m", "needle 1m"]


def test_a_changed_byte_fails_and_names_the_run():
    code, out, _ = check("alter")
    assert code == 1
    assert "sweep-128k-1: " in out and "CSV DIFFERS from docs/results/device-h200/sweep-128k.csv" in out


def test_a_failing_cli_fails_every_run():
    code, out, calls = check("fail")
    assert code == 1 and len(calls) == 4
    assert out.count("exit 3 (see ") == 4


def test_bad_arguments_exit_2():
    done = subprocess.run(["bash", SCRIPT, "/nonexistent/dsa-fidelity", "/tmp/x"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print(f"ok {name}")
