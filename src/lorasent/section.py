"""The base of every params section (``lorasent.params``, ``lorasent.baseline_params``)."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


class Section(BaseModel):
    """A params section: unknown keys refused, frozen, no NaN or infinity, no boolean
    where a number is expected."""


    # allow_inf_nan: a float key refuses .nan and .inf (YAML), as the options refuse nan
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse ``true``/``false`` where a number is expected: pydantic's lax mode
        reads them as 1 and 0 (``base.seed: true`` would train with seed 1)."""
        if isinstance(value, bool) and info.field_name is not None:
            types = types_of(cls.model_fields[info.field_name].annotation)
            if bool not in types and types & {int, float}:
                raise PydanticCustomError(
                    "bool_for_number", "a number is expected, not a boolean (YAML reads "
                    "true, false, yes, no, on and off as booleans); write a number")
        return value


def types_of(annotation: Any) -> set[Any]:
    """The plain types an annotation admits: ``Annotated[int, ...] | float`` -> int, float."""
    args = get_args(annotation)
    return set().union(*map(types_of, args)) if args else {annotation}
