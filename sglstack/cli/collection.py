"""Every task, as one invoke collection: what `invoke` in a checkout (tasks.py) and the `sglstack` command run.

Standard library and invoke only at import, like every module here.
"""

from __future__ import annotations

from invoke import Collection

from . import (
    attest,
    bisect,
    build,
    coverage,
    deploy,
    diff,
    lock,
    patches,
    preflight,
    publish,
    render,
    size,
    smoke,
    stacks,
    testing,
    upgrade,
)


def task_collection() -> Collection:
    """A new collection of every task (invoke configures the one it is given)."""
    ns = Collection()
    for task in (
        preflight.preflight, stacks.stacks, lock.lock, diff.diff, render.render, build.build, attest.sbom,
        attest.verify_image, build.bake, coverage.coverage, size.size, upgrade.releases, upgrade.upgrade,
        smoke.smoke, bisect.bisect, publish.publish, publish.publish_index, build.seed_base,
        deploy.deploy, deploy.status, deploy.logs, deploy.undeploy, deploy.rollback, testing.test_,
    ):
        ns.add_task(task)
    ns.add_collection(Collection("registry", publish.registry_up, publish.registry_down, publish.registry_cleanup))
    ns.add_collection(Collection("patches", patches.patches_list, patches.patches_check, patches.patches_apply,
                                 patches.patches_verify))
    return ns
