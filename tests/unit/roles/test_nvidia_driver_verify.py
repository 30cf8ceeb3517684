"""nvidia_driver's check after an install: the version now on the node must equal the pin."""

from __future__ import annotations

import pytest
import yaml

from tests.unit.roles.render import NATIVE, ROLES, TEXT

TASKS = yaml.safe_load((ROLES / "nvidia_driver/tasks/verify.yml").read_text())
ASSERT = next(t for t in TASKS if "ansible.builtin.assert" in t)["ansible.builtin.assert"]


def _holds(installed: str, pin: str) -> bool:
    ctx = {"__nvidia_driver_after": {"stdout": installed}, "__nvidia_driver_pin": pin}
    return all(NATIVE.from_string("{{ " + cond + " }}").render(**ctx) for cond in ASSERT["that"])


@pytest.mark.parametrize(("installed", "pin", "ok"), [
    ("535.309.01-1~deb12u1\n", "535.309.01", True),   # Debian's package version for the distro pin
    ("570.124.06-0ubuntu1", "570.124.06", True),
    ("570.124.06", "570.124.06", True),                 # runfile: nvidia-installer --version
    ("570.124.061", "570.124.06", False),               # a longer version is another version
    ("535.216.01-1", "535.309.01", False),
    ("", "535.309.01", False),                          # nothing installed
])
def test_installed_version_must_equal_the_pin(installed: str, pin: str, ok: bool) -> None:
    assert _holds(installed, pin) is ok


def test_failure_names_what_is_installed_and_the_pin() -> None:
    msg = TEXT.from_string(ASSERT["fail_msg"]).render(
        nvidia_driver_install_method="cuda_repo", __nvidia_driver_after={"stdout": "535.216.01-1\n"},
        __nvidia_driver_pin="570.124.06")
    assert "driver 535.216.01-1" in msg and "the pin 570.124.06" in msg and "cuda_repo" in msg
