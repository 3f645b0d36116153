"""`invoke render`: the Dockerfile, build context, compose file and (by digest) Kubernetes manifests."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.imageref import not_an_image
from ..core.options import TaskOptions, option, stacks_file_option
from .attest import expected_identity
from .cmdoptions import host_network_option, rdma_option, stack_option, verify_key_option
from .options import command


@dataclass(frozen=True)
class RenderOptions(TaskOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()
    out: str | None = option("output folder (default: build/STACK, under SGLSTACK_BUILD_DIR if set)")
    image: str | None = option("image reference the compose file serves (default: the moving tag REPOSITORY:STACK); "
                               "REPO@sha256:... also writes the Kubernetes manifests (k8s/)", check=not_an_image)
    nnodes: int = option("k8s: pods (nodes) per LeaderWorkerSet group (default 1)", 1, kind=int)
    host_network: bool = host_network_option()
    rdma: str | None = rdma_option()
    verify_key: str | None = verify_key_option("refuse --image unless it verifies against this ed25519 public key "
                                               "(PEM) and its signed provenance names this stack, its config hash and "
                                               "SGLang release; the manifests then name the verified digest")
    platform: str | None = option("the stack's platform to render (default: the stack as a whole): its base and "
                                  "lock, into its build folder (build/STACK.OS-ARCH past the first)")


@command(RenderOptions)
def render(o: RenderOptions) -> None:
    """Render build/STACK/Dockerfile, its build context, compose file and (by digest) k8s manifests."""
    # at call time: pydantic and jinja2 would slow `invoke --list`
    from ..config.matrix import load_matrix
    from ..imagebuild.context import render_stack_folder
    from ..render.k8s import K8sOptions  # at call time: as above

    image = o.image
    if o.verify_key:
        from ..attest.verify import verified_for_render  # at call time: only with --verify-key

        image = verified_for_render(image, o.verify_key, expected_identity(o.stacks_file, o.stack))
    options = K8sOptions.from_options(o)  # nnodes, host_network, rdma: the rest are deploy's
    render_stack_folder(o.stacks_file, load_matrix(o.stacks_file).get(o.stack), out_dir=o.out, image=image,
                        k8s_options=options, platform=o.platform)
