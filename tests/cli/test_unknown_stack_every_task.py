"""`--stack` with a typo is refused by every task that takes it, before any work: one line naming the stacks
file, the known stacks and the nearest one, exit 2 (attack pass of issue 34; `status` showed "nothing deployed",
exit 0)."""

from __future__ import annotations

import pytest
from clirun import REPO, run_invoke, task_collection

DIGEST = "sha256:" + "a" * 64
# what each task needs besides --stack to get as far as reading it
NEEDS = {"bisect": ("--good", "a", "--bad", "b"), "patches.apply": ("--root", "{tree}"),
         "patches.verify": ("--root", "{tree}"),
         "publish": ("--digest", DIGEST), "publish-index": ("--tag", "candidate"), "upgrade": ("--sglang", "0.5.9"),
         "verify-image": ("img:1",)}
ns = task_collection()
TASKS = sorted(name for name in ns.task_names if any(a.name == "stack" for a in ns[name].get_arguments()))


def test_the_walk_sees_the_tasks_that_take_a_stack():
    assert {"status", "logs", "render", "smoke", "bisect", "patches.apply", "verify-image"} <= set(TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_a_mistyped_stack_is_one_line_with_the_nearest(tmp_path, task):
    (tmp_path / "tree" / "sglang").mkdir(parents=True)  # a source tree for the patch tasks
    args = [arg.format(tree=tmp_path / "tree") for arg in NEEDS.get(task, ())]
    tmp_path = tmp_path / "run"
    tmp_path.mkdir()
    proc = run_invoke(task, "--stack", "cu13", *args, cwd=tmp_path, timeout=120,
                      env={"SGLSTACK_BUILD_DIR": str(tmp_path / "build"), "DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: {REPO / 'stacks.yaml'}: stack 'cu13': unknown stack (known: cu129, cu130, "
                           f"h200-field, pypi-cu130, pypi-cu130-gb); did you mean 'cu130'?\n")
    assert list(tmp_path.iterdir()) == []


def test_a_patch_root_without_sglang_is_bad_input(tmp_path):
    # was PatchCommandError, exit 1
    proc = run_invoke("patches.apply", "--stack", "cu130", "--root", str(tmp_path), cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        2, f"error: {tmp_path} holds no sglang/ package (pass the folder that contains it)\n")
