"""_as_written (gpucluster.inventory_model) on an outputs model that holds models in a list, a tuple,
a dict or an Optional of them: no outputs model has such a field yet, so these synthetic models
stand in for the next one. Each model there is read back as written too (every field, no other key,
no coercion), and each problem is named at its full path (``gpucluster_access.x[1].y``)."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from gpucluster.inventory_model import _as_written
from gpucluster.spec.loader import validation_problems


class _Tolerant(BaseModel):
    # As the outputs' models are (gpucluster.outputs._Out): defaults for what older outputs lack,
    # newer keys ignored. Only _as_written makes their read-back strict.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Leaf(_Tolerant):
    y: int = 0
    z: str = ""


class Holder(_Tolerant):
    one: Leaf = Leaf()
    maybe: Leaf | None = None
    x: list[Leaf] = []
    fixed: tuple[Leaf, ...] = ()
    pair: tuple[Leaf, int] | None = None
    by_name: dict[str, Leaf] = {}
    maybe_list: list[Leaf] | None = None
    nested: dict[str, list[Leaf]] | None = None
    plain: list[int] = []


class Vars(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    gpucluster_access: Annotated[Holder, _as_written(Holder)]


LEAF = {"y": 1, "z": "a"}


def _written() -> dict[str, Any]:
    """What a writer dumps, each model's mapping its own (so that a test edits one).

    The tuples are Python tuples: strict validation takes no list for a tuple (a YAML file holds
    lists only, so a tuple field of an outputs model would be refused from the inventory as it is)."""
    def leaf() -> dict[str, Any]:
        return dict(LEAF)
    return {"one": leaf(), "maybe": leaf(), "x": [leaf(), leaf()], "fixed": (leaf(),), "pair": (leaf(), 3),
            "by_name": {"a": leaf()}, "maybe_list": [leaf()], "nested": {"n": [leaf(), leaf()]}, "plain": [1]}


def _problems(holder: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as err:
        Vars.model_validate({"gpucluster_access": holder})
    return sorted(validation_problems(err.value, Vars, "all.vars"))


def test_what_the_writer_wrote_reads_back() -> None:
    got = Vars.model_validate({"gpucluster_access": _written()}).gpucluster_access
    assert got.x == [Leaf(y=1, z="a")] * 2 and got.by_name == {"a": Leaf(y=1, z="a")}
    assert got.nested == {"n": [Leaf(y=1, z="a")] * 2} and got.pair == (Leaf(y=1, z="a"), 3)
    # None where the type allows it, and empty containers, hold no model to read.
    empty = dict(_written(), maybe=None, maybe_list=None, nested=None, pair=None, x=[], by_name={})
    assert Vars.model_validate({"gpucluster_access": empty}).gpucluster_access.x == []


@pytest.mark.parametrize(("field", "value", "where"), [
    ("one", {"y": 1}, "one"),
    ("maybe", {"y": 1}, "maybe"),
    ("x", [LEAF, {"y": 1}], "x[1]"),
    ("fixed", (LEAF, {"y": 1}), "fixed[1]"),
    ("pair", ({"y": 1}, 3), "pair[0]"),
    ("by_name", {"a": LEAF, "b": {"y": 1}}, "by_name.b"),
    ("maybe_list", [{"y": 1}], "maybe_list[0]"),
    ("nested", {"n": [LEAF, {"y": 1}]}, "nested.n[1]"),
])
def test_a_model_in_a_container_missing_a_field_is_named_at_its_path(field: str, value: Any, where: str) -> None:
    holder = dict(_written(), **{field: value})
    assert _problems(holder) == [f"all.vars.gpucluster_access.{where}.z: is required"]


def test_a_model_in_a_container_with_an_extra_key_or_a_coerced_value_is_refused() -> None:
    holder = _written()
    holder["x"][1]["extra"] = 1
    holder["by_name"]["a"]["y"] = "1"
    holder["nested"]["n"][0]["zz"] = "b"
    assert _problems(holder) == [
        "all.vars.gpucluster_access.by_name.a.y: must be an integer (got '1')",
        "all.vars.gpucluster_access.nested.n[0].zz: unknown key (did you mean 'z'?)",
        "all.vars.gpucluster_access.x[1].extra: unknown key"]


def test_every_problem_at_once_and_a_wrong_shape_left_to_the_model() -> None:
    holder = _written()
    del holder["x"][0]["y"]
    holder["by_name"] = [LEAF]
    holder["maybe_list"] = {"0": LEAF}
    del holder["plain"]
    assert _problems(holder) == [
        "all.vars.gpucluster_access.by_name: must be a mapping (got list)",
        "all.vars.gpucluster_access.maybe_list: must be a list (got dict)",
        "all.vars.gpucluster_access.plain: is required",
        "all.vars.gpucluster_access.x[0].y: is required"]
