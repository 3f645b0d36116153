"""Every task, as one invoke collection: what `invoke` in a checkout (tasks.py) and the `sglstack` command run.

Standard library and invoke only at import, like every module here.
"""

from __future__ import annotations

from invoke import Collection

from . import build, deploy, gpu, images, patches, publish, render, stacks, testing


def task_collection() -> Collection:
    """A new collection of every task (invoke configures the one it is given)."""
    ns = Collection()
    for task in (
        gpu.preflight, stacks.stacks, stacks.lock, images.diff, render.render, build.build, images.sbom,
        images.verify_image, build.bake, images.coverage, images.size, stacks.releases, stacks.upgrade,
        gpu.smoke, gpu.bisect, publish.publish, publish.publish_index, build.seed_base,
        deploy.deploy, deploy.status, deploy.logs, deploy.undeploy, deploy.rollback, testing.test_,
    ):
        ns.add_task(task)
    ns.add_collection(Collection("registry", publish.registry_up, publish.registry_down, publish.registry_cleanup))
    ns.add_collection(Collection("patches", patches.patches_list, patches.patches_check, patches.patches_apply,
                                 patches.patches_verify))
    return ns
