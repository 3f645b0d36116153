"""Field truth for the SGLang 0.5.23 image (stack pypi-cu130) on a real H200 (CC 9.0).

benchmarks/coverage_gpu/image_cubins.py took sm_90 / sm_90a cubins out of every device-code object of the
image's CUDA packages (all of an object's when it has at most 12, else 12 spread through cuobjdump's
listing, under a 56 MiB transfer budget), plus up to 2 cubins of other targets per object;
load_cubins.py loaded each on the H200 with cuModuleLoadData. The recording is
tests/data/coverage/h200-pypi-cu130-observed.json; the coverage table the build computed for the same image
(its 9.0 column) is tests/data/coverage/pypi-cu130-table-9.0.json. Each must agree with the other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglstack.coverage.rules import Capability, Target, runs_on

DATA = Path(__file__).resolve().parents[1] / "data" / "coverage"
OBSERVED = json.loads((DATA / "h200-pypi-cu130-observed.json").read_text())
TABLE = json.loads((DATA / "pypi-cu130-table-9.0.json").read_text())
HOPPER = Capability(9, 0)


def _object_loaded(row: dict) -> str:
    """The file a 9.0 GPU loads for a table row: its 9.0 detail is 'PATH: targets'."""
    return row["detail"].split(":", 1)[0]


def test_the_recording_is_the_tables_image_on_an_h200():
    assert OBSERVED["capability"] == "9.0" and "H200" in OBSERVED["device"]
    assert OBSERVED["stack"] == TABLE["stack"] == "pypi-cu130" and OBSERVED["image_id"] == TABLE["image_id"]
    hopper = [c for c in OBSERVED["cubins"] if c["target"] in ("sm_90", "sm_90a")]
    assert len(hopper) == 215 and len(OBSERVED["cubins"]) - len(hopper) == 50


@pytest.mark.parametrize("cubin", OBSERVED["cubins"], ids=lambda c: f"{c['object']}:{c['name']}")
def test_every_cubin_loaded_exactly_where_the_rules_say(cubin):
    expected = runs_on(Target.parse(cubin["target"], "sass"), HOPPER)
    assert cubin["load"] == ("CUDA_SUCCESS" if expected else "CUDA_ERROR_NO_BINARY_FOR_GPU"), cubin


def test_the_tables_9_0_column_matches_what_the_h200_loaded():
    by_object: dict[str, list[dict]] = {}
    for cubin in OBSERVED["cubins"]:
        by_object.setdefault(cubin["object"], []).append(cubin)
    sampled = {o["object"]: o for o in OBSERVED["objects"]}
    checked = 0
    for row in TABLE["rows"]:
        path = _object_loaded(row)
        loaded = [c for c in by_object.get(path, []) if c["load"] == "CUDA_SUCCESS"]
        if row["cell"] == "native":
            assert path in sampled and sampled[path]["hopper_cubins"] > 0, row
            if sampled[path]["hopper_chosen"]:
                assert loaded and all(c["target"] in ("sm_90", "sm_90a") for c in loaded), row
                checked += 1
        else:  # no SASS for 9.0: nothing of that object may load on the H200
            assert loaded == [] and sampled.get(path, {"hopper_cubins": 0})["hopper_cubins"] == 0, row
    # rows whose 9.0 object had no sm_90 cubin in the sample (over budget, or over 2 MiB) are named here
    unsampled = sorted(_object_loaded(r) for r in TABLE["rows"] if r["cell"] == "native"
                       and not sampled[_object_loaded(r)]["hopper_chosen"])
    assert unsampled == ["deep_ep/_C.cpython-311-x86_64-linux-gnu.so", "nvidia/cu13/lib/libcurand.so.10",
                         "nvidia/nvshmem/lib/libnvshmem_host.so.3"]
    assert checked == sum(1 for r in TABLE["rows"] if r["cell"] == "native") - len(unsampled)
