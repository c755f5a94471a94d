"""The OTA plan (q25deploy/ota/plan.py): what the board's root-run script will be told."""

from __future__ import annotations

import pytest

from q25deploy.errors import PackageError
from q25deploy.ota.plan import plan_package
from q25deploy.tokenizer.prompts import SMOKE_PROMPTS

IDS = [[1]] * len(SMOKE_PROMPTS)


@pytest.mark.parametrize("q25tok", ["/bin/rm", "/usr/bin/q25tok-old", "/usr/bin/../bin/q25tok"])
def test_the_plan_names_only_a_plain_q25tok(builds, q25tok):
    """The board runs the plan's q25tok as root for its smoke test; a path to another program
    (`/bin/rm info IMAGE`) or one that climbs is refused when the artifact is made."""
    with pytest.raises(PackageError, match="q25tok"):
        plan_package(builds["qemu"], target="qemu", install_dir="/lib/firmware/q25", q25tok=q25tok, smoke_ids=IDS)


def test_a_plain_q25tok_is_planned(builds):
    plan = plan_package(
        builds["qemu"], target="qemu", install_dir="/lib/firmware/q25", q25tok="/opt/q25/bin/q25tok", smoke_ids=IDS
    )
    assert plan.q25tok == "/opt/q25/bin/q25tok"
