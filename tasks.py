"""Invoke tasks: the collection of `sglstack.cli`, where each task parses its options and calls one function.

`invoke --list` shows every task; `invoke TASK -h` its options. Bad input to invoke's parser (an unknown task
or option, a flag without its value) is a refusal like any other: one `error:` line, exit 2 (`sglstack.cli.program`).
"""

from __future__ import annotations

from invoke import Collection

from sglstack.cli import build, deploy, gpu, images, patches, publish, render, stacks, testing
from sglstack.cli.program import adopt_running_program

adopt_running_program()

ns = Collection()
for _task in (
    gpu.preflight, stacks.stacks, stacks.lock, images.diff, render.render, build.build, images.sbom,
    images.verify_image, build.bake, images.coverage, images.size, stacks.releases, stacks.upgrade,
    gpu.smoke, gpu.bisect, publish.publish,
    deploy.deploy, deploy.status, deploy.logs, deploy.undeploy, deploy.rollback, testing.test_,
):
    ns.add_task(_task)
ns.add_collection(Collection("registry", publish.registry_up, publish.registry_down, publish.registry_cleanup))
ns.add_collection(Collection("patches", patches.patches_list, patches.patches_check, patches.patches_apply,
                             patches.patches_verify))
