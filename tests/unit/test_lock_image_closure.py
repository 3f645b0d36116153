"""A lock whose `# via` lines were made up to carry an added entry, its `written-sha256` recomputed, passes every
check of the file alone; the image's own metadata (each installed distribution's Requires-Dist, read by the
in-image inventory) still shows that nothing the stack asked for needs the entry, so the build is not verified."""

from __future__ import annotations

import pytest
from lock_forgery import FIXTURES, SIX, forged_lock_text

from sglstack.config.matrix import load_matrix
from sglstack.inventory.model import Inventory, InventoryError
from sglstack.lock.plan import root_names
from sglstack.lock.trust import lock_for_build, unrequired_in_image
from sglstack.lockfile.model import lock_path
from sglstack.lockfile.text import parse_lock

# What the real distributions' METADATA names (requests 2.32.3: its extras' chardet and PySocks too).
REQUIRES = {"requests": ["certifi", "charset-normalizer", "chardet", "idna", "pysocks", "urllib3"],
            "certifi": [], "charset-normalizer": [], "idna": [], "urllib3": ["brotli", "h2", "pysocks", "zstandard"],
            "six": [], "sglang": ["aiohttp", "requests", "torch"]}


@pytest.fixture
def forged(tmp_path):
    stacks = tmp_path / "stacks-lock.yaml"
    stacks.write_text((FIXTURES / "stacks-lock.yaml").read_text())
    path = lock_path(stacks, "cpu-lock")
    path.parent.mkdir()
    path.write_text(forged_lock_text((FIXTURES / "locks" / "cpu-lock.txt").read_text()))
    return stacks, path


def test_a_forged_lock_passes_the_file_checks_but_not_the_image_metadata(forged):
    stacks, _ = forged
    stack = load_matrix(stacks).get("cpu-lock")
    lock = lock_for_build(stacks, stack)  # the file alone cannot tell: made-up edges, consistent digests
    assert lock is not None and lock.get("six") is not None
    installed = {name: "x" for name in REQUIRES}
    assert unrequired_in_image(lock, root_names(stack), installed, REQUIRES) == [
        "six==1.16.0 is installed from the lock, but no package the stack asks for requires it (by the "
        "Requires-Dist of what the image holds): the lock names it without need"]


def test_the_honest_lock_is_needed_whole_by_the_image_metadata():
    stack = load_matrix(FIXTURES / "stacks-lock.yaml").get("cpu-lock")
    lock = parse_lock((FIXTURES / "locks" / "cpu-lock.txt").read_text())
    installed = {name: "x" for name in REQUIRES if name != "six"}
    assert unrequired_in_image(lock, root_names(stack), installed, REQUIRES) == []
    # an entry not installed is another check's finding (the image lacks it), not this one's
    assert unrequired_in_image(lock, root_names(stack), {}, REQUIRES) == []


def test_a_forged_pair_that_require_each_other_is_still_needed_by_nothing(forged):
    stacks, _ = forged
    pair = SIX + ("evil==1.0 \\\n    --hash=sha256:" + "e" * 64 + "\n    # via six\n")
    text = forged_lock_text((FIXTURES / "locks" / "cpu-lock.txt").read_text(), entry=pair)
    text = text.replace("# packages: 7 (7 hashed, 0 unhashed)", "# packages: 8 (8 hashed, 0 unhashed)")
    lock = parse_lock(text)
    stack = load_matrix(stacks).get("cpu-lock")
    requires = {**REQUIRES, "six": ["evil"], "evil": ["six"]}
    found = unrequired_in_image(lock, root_names(stack), dict.fromkeys(requires, "x"), requires)
    assert [line.split(" ", 1)[0] for line in found] == ["six==1.16.0", "evil==1.0"]


def test_the_listing_carries_requires_and_refuses_a_malformed_one():
    listing = {"python_distributions": [{"name": "Requests", "version": "2.32.3", "requires": ["idna", "PySocks"]},
                                        {"name": "old-lister", "version": "1"}], "debian_packages": []}
    inventory = Inventory.from_listing(listing)
    assert inventory.requires == {"requests": ("idna", "pysocks"), "old-lister": ()}
    listing["python_distributions"][0]["requires"] = "idna"
    with pytest.raises(InventoryError, match=r"^the image's inventory is malformed \(a distribution's 'requires'"):
        Inventory.from_listing(listing)
