"""The engine side of the inventory: run the stdlib lister (`incontainer/inventory.py`) inside an image.

Its source goes in as `python3 -c SOURCE`, so any image with a Python 3.8+ interpreter on its PATH can
be listed, ours or not; nothing is copied into it and it runs without a network.
"""

from __future__ import annotations

from collections.abc import Mapping

import docker
import docker.errors

from ..adapters.docker import running_container
from ..core.errors import first_line, last_line
from ..core.inputs import loads
from ..core.resources import TOOLS_DIR
from .model import Inventory, InventoryError

LISTER = TOOLS_DIR / "inventory.py"


def image_inventory(client: docker.DockerClient, image: str, *, labels: Mapping[str, str] | None = None,
                    timeout_s: float = 300) -> Inventory:
    """What `image` contains, listed inside it by its own `python3`."""
    source = LISTER.read_text(encoding="utf-8")
    try:
        with running_container(client, image, command=["python3", "-c", source], entrypoint=[],
                               name_prefix="sglstack-sbom", labels=labels, network_disabled=True) as container:
            code = int(container.wait(timeout=timeout_s).get("StatusCode", 1))
            out = container.logs(stdout=True, stderr=False)
            err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace").strip()
    except docker.errors.ImageNotFound:
        raise InventoryError(f"image '{image}' is not in the engine") from None
    except docker.errors.APIError as exc:
        reason = first_line(str(exc.explanation or exc))
        if "executable file not found" in reason or "no such file" in reason.lower():
            raise InventoryError(f"image '{image}' has no python3 on its PATH: its packages cannot be listed "
                                   f"for an SBOM") from None
        raise InventoryError(f"listing the packages of image '{image}' failed: {reason}") from None
    if code != 0:
        last = last_line(err) if err.strip() else f"exit {code}"
        raise InventoryError(f"listing the packages of image '{image}' failed: {last}")
    try:
        return Inventory.from_listing(loads(out))
    except ValueError:
        raise InventoryError(f"listing the packages of image '{image}' printed no JSON") from None
