"""Two pytest sessions in one process (pytester, a check that runs pytest) keep their own run
state: each has its own :class:`~gpucluster.conformance.plugin.Collector`, so one session's
results never reach the other's report, and one session ending clears nothing of the other's.

In-process: the checks here carry a check ID themselves (what the plugin's collection adds under
``--inventory``), so no inventory is loaded and no node is probed over SSH.
"""

from __future__ import annotations

import textwrap

import pytest

from gpucluster.conformance import plugin

pytest_plugins = ["pytester"]

# The plugin under test; no cache; no hypothesis plugin (it imports trio, which runs ldconfig: a
# process); the plugin module is already imported, so pytest cannot rewrite its asserts. No
# unraisable-exception plugin: at each session's end it runs gc.collect() five times over this whole
# process (every module the unit run has loaded, 0.3-0.5 s each here), which is not what is tested
# (pytester's own in-process run sets those rounds to 0; parseconfigure and pytest.main do not).
ARGS = ["-p", "gpucluster.conformance.plugin", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
        "-p", "no:unraisableexception", "-W", "ignore::pytest.PytestAssertRewriteWarning"]

AS_CHECK = '''
import pytest


@pytest.fixture(autouse=True)
def _as_check(request):
    request.node.user_properties.append(("check_id", "GC-OS-001"))
'''

# Session A: its first check has a result when its second runs session B to its end.
FIRST = AS_CHECK + '''
from pathlib import Path

from gpucluster.conformance import plugin

ARGS = {args!r}


def test_first():
    pass


def test_a_second_session_meanwhile(pytestconfig):
    seen = []

    class Probe:
        def pytest_sessionfinish(self, session):
            seen.extend(r.test for r in plugin.collector(session.config).results)

    second = Path(__file__).with_name("second")
    code = pytest.main([str(second), *ARGS], plugins=[Probe()])
    assert code == 0
    assert seen == ["second/test_second.py::test_second"]
    assert [r.test for r in plugin.collector(pytestconfig).results] == ["test_first.py::test_first"]
'''

SECOND = AS_CHECK + '''

def test_second():
    pass
'''


def test_a_session_inside_another_sees_only_its_own_results_and_leaves_the_others(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_first=textwrap.dedent(FIRST).replace("{args!r}", repr(ARGS)))
    (pytester.mkdir("second") / "test_second.py").write_text(textwrap.dedent(SECOND))
    seen: list[tuple[str, str]] = []

    class Probe:
        def pytest_sessionfinish(self, session: pytest.Session) -> None:
            seen.extend((r.test, r.outcome) for r in plugin.collector(session.config).results)

    out = pytester.runpytest_inprocess("test_first.py", *ARGS, plugins=[Probe()])
    out.assert_outcomes(passed=2)
    assert seen == [("test_first.py::test_first", "passed"),
                    ("test_first.py::test_a_second_session_meanwhile", "passed")]


def test_each_session_has_its_own_collector_registered_as_a_plugin(pytester: pytest.Pytester) -> None:
    first = pytester.parseconfigure(*ARGS)
    second = pytester.parseconfigure(*ARGS)
    assert plugin.collector(first) is not plugin.collector(second)
    assert first.pluginmanager.get_plugin(plugin.COLLECTOR_PLUGIN) is plugin.collector(first)
    assert second.pluginmanager.get_plugin(plugin.COLLECTOR_PLUGIN) is plugin.collector(second)
