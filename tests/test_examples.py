"""The README's main job and its code sample work as written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_quickstart_prints_the_plan_and_results_in_order() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "run 1 serial_mut: call_3 write_note" in out
    ids = re.findall(r"^  (call_\d) ", out.split("results (in call order):")[1], re.M)
    assert ids == [f"call_{i}" for i in range(1, 7)]
    assert "call_1 read_note [ok]: - ship the executor" in out
    assert "call_4 read_note [ok]: - done" in out
    assert "call_5 delete_note [not_found]" in out


def test_readme_main_job_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    line = readme.split("Run the main job")[1].split("```sh\n")[1].split("\n")[0]
    command = line.split("&& ")[-1].replace(".venv/bin/toolexec", f"{sys.executable} -m toolexec")
    workspace = tmp_path / "workspace"
    shutil.copytree(ROOT / "examples" / "workspace", workspace)
    command = command.replace("examples/workspace", str(workspace))
    proc = subprocess.run(
        command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "run 1 serial_mut: call_Ha3dE0sYc7JiPq4M write_file" in proc.stderr
    assert "5 call(s): 5 ok, 0 error(s)" in proc.stderr
    messages = json.loads(proc.stdout)
    assert [m["role"] for m in messages] == ["tool"] * 5
    assert (workspace / "out" / "summary.md").exists()


def test_readme_sample_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    code = readme.split("## In thirty seconds")[1].split("```python")[1].split("```")[0]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.splitlines()[0].startswith("1 False")
    assert out.splitlines()[1].startswith("2 True")
