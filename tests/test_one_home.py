"""One home for each rule (issue 22): the behaviours that disagreed while a rule lived in two places.

--smoke-opt (smoke.options), image id vs registry digest (adapters.docker), image references
(config.imageref), label keys (core.labels), render writing nothing (build.context).
"""

from __future__ import annotations

import pytest
from bisect_fixtures import stack_yaml

from sglstack.bisect import driver
from sglstack.bisect.driver import BisectInputError, BisectRequest
from sglstack.publish import PublishError, parse_smoke_opts
from sglstack.smoke.options import SmokeOptionError
from sglstack.smoke.options import parse_smoke_opts as smoke_opts_parser

# ---- --smoke-opt: one parser for bisect and publish ------------------------------------------------

SMOKE_OPTS = ["env=A=1", "env=B=2", "mount={a}:/data/a", "mount={b}:/data/b", "gpus=0", "max-new-tokens=8"]


def _opts(tmp_path) -> list[str]:
    for name in ("a", "b"):
        (tmp_path / name).mkdir(exist_ok=True)
    return [o.format(a=tmp_path / "a", b=tmp_path / "b") for o in SMOKE_OPTS]


def test_bisect_keeps_every_env_and_mount(tmp_path):
    """The old bisect parser kept the last `env=` (`{'env': 'B=2'}`) and dropped all mounts but one."""
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(str(tmp_path / "sglang"), "0" * 40, patches=()))
    smoke = driver.smoke_overrides(_opts(tmp_path), env=["C=3"], mounts=None)
    request = BisectRequest(stack="synth", good="a", bad="b", stacks_file=matrix, smoke=smoke)
    *_, options = driver.prepare(request)  # the path bisect's smoke options take before any build
    assert options.env == {"A": "1", "B": "2", "C": "3"}
    assert [m.target for m in options.serving.mounts] == ["/data/a", "/data/b"]
    assert options.max_new_tokens == 8 and options.gpus == 0


def test_bisect_and_publish_read_smoke_opts_alike(tmp_path):
    opts = _opts(tmp_path)
    expected = {"env": {"A": "1", "B": "2"}, "mounts": [opts[2].partition("=")[2], opts[3].partition("=")[2]],
                "gpus": "0", "max_new_tokens": "8"}
    assert parse_smoke_opts(opts) == driver.smoke_overrides(opts) == smoke_opts_parser(opts) == expected


@pytest.mark.parametrize(("bad", "message"), [
    ("bogus", "--smoke-opt 'bogus': expected KEY=VALUE"),
    ("env=oops", "--smoke-opt 'env=oops': expected env=NAME=VALUE"),
    ("gpus=0 gpus=1", "gpus is given twice"),
])
def test_a_bad_smoke_opt_is_one_error_in_every_caller(bad, message):
    pairs = bad.split()
    for call, error in ((smoke_opts_parser, SmokeOptionError), (parse_smoke_opts, PublishError),
                        (driver.smoke_overrides, BisectInputError)):
        with pytest.raises(error, match=message.replace("?", r"\?")):
            call(pairs)


def test_a_named_flag_wins_over_a_smoke_opt_and_lists_add_up():
    got = driver.smoke_overrides(["gpus=1", "env=A=1", "mount=/x:/x", "extra-args=--a 1"],
                                 gpus=0, env=["A=2"], mounts=["/y:/y"], model=None)
    assert got == {"gpus": 0, "env": {"A": "2"}, "mounts": ["/x:/x", "/y:/y"], "extra_args": ["--a", "1"]}
